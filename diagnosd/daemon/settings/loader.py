"""Reads Settings from their sources: a YAML file, DIAGNOSD_* variables and command-line overrides.

Later sources win (file < environment < flags). Every problem is reported at once, each naming its
source (file:line, variable or flag); values are never echoed, so a secret cannot leak through an
error. A secret may also come from a file: `bearer_token_file`, DIAGNOSD_AUTH_API_TOKENS_FILE...
"""

from __future__ import annotations

import json
import logging
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from diagnosd.daemon.settings.model import Settings
from diagnosd.errors import Problem, SettingsError
from diagnosd.trees.loader import describe
from diagnosd.trees.location import rules_dir_variable
from diagnosd.trees.yamlfile import read_yaml

log = logging.getLogger(__name__)

PREFIX = "DIAGNOSD_"
# (section, field) of every secret that may be read from a file instead; lists take one per line.
SECRETS = {
    ("prometheus", "bearer_token"),
    ("prometheus", "password"),
    ("auth", "api_tokens"),
    ("auth", "webhook_tokens"),
    ("auth", "webhook_password"),
}
Key = tuple[str, ...]


class _Sources:
    """Merged raw data with, for every leaf set, where it came from."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.origin: dict[Key, str] = {}
        self.problems: list[Problem] = []

    def set(self, key: Key, value: Any, origin: str) -> None:
        node = self.data
        for part in key[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[key[-1]] = value
        self.origin[key] = origin

    def where(self, loc: Key) -> str:
        for cut in range(len(loc), 0, -1):
            if loc[:cut] in self.origin:
                return self.origin[loc[:cut]]
        return "settings"


def load_settings(
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[Key, Any] | None = None,
) -> Settings:
    """Settings from the file, the environment and flags; raises SettingsError with every problem."""
    sources = _Sources()
    if config_file is not None:
        _read_file(config_file, sources)
        if sources.problems:
            raise SettingsError(sources.problems)  # what is missing would only be noise
    _read_environ(environ or {}, sources)
    for key, value in (overrides or {}).items():
        sources.set(key, value, f"--{key[-1].replace('_', '-')}")
    _read_secret_files(sources)
    try:
        settings = Settings.model_validate(sources.data)
    except ValidationError as error:
        sources.problems.extend(_problem(item, sources) for item in error.errors())
        raise SettingsError(sources.problems) from None
    if sources.problems:
        raise SettingsError(sources.problems)
    return settings


def _read_file(path: Path, sources: _Sources) -> None:
    try:
        located = read_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        sources.problems.append(Problem(str(path), None, "", f"cannot read: {error}"))
        return
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        sources.problems.append(Problem(str(path), line, "", f"invalid YAML: {_first_line(error)}"))
        return
    if located.data is None:
        return
    if not isinstance(located.data, dict):
        sources.problems.append(Problem(str(path), 1, "", "the settings file must be a mapping of sections"))
        return
    for key in _leaves(located.data):
        sources.set(key, _at(located.data, key), f"{path}:{located.line(key)}")


def _first_line(error: yaml.YAMLError) -> str:
    """The parser's complaint without the excerpt of the file it quotes (it may hold a secret)."""
    problem = getattr(error, "problem", None)
    return str(problem) if problem else type(error).__name__


def _leaves(data: dict[str, Any], prefix: Key = ()) -> list[Key]:
    """Keys down to the fields of sections (a field's own value, even a mapping, stays whole)."""
    out: list[Key] = []
    for name, value in data.items():
        key = (*prefix, str(name))
        section = not prefix and isinstance(value, dict) and _is_section(str(name))
        out.extend(_leaves(value, key) if section else [key])
    return out


def _is_section(name: str) -> bool:
    field = Settings.model_fields.get(name)
    return field is not None and isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)


def _at(data: Any, key: Key) -> Any:
    for part in key:
        data = data[part]
    return data


def env_names() -> dict[str, Key]:
    """Every DIAGNOSD_* variable and the setting it sets (secrets also as ..._FILE)."""
    names: dict[str, Key] = {}
    for name, field in Settings.model_fields.items():
        if _is_section(name):
            section: type[BaseModel] = field.annotation  # type: ignore[assignment]
            for inner, spec in section.model_fields.items():
                key = (name, spec.alias or inner)
                names[f"{PREFIX}{name}_{key[1]}".upper()] = key
                if (name, inner) in SECRETS:
                    names[f"{PREFIX}{name}_{key[1]}_FILE".upper()] = (name, f"{key[1]}_file")
        else:
            names[f"{PREFIX}{name}".upper()] = (name,)
    return names


def _read_environ(environ: Mapping[str, str], sources: _Sources) -> None:
    known = env_names()
    for variable, raw in sorted(environ.items()):
        if not variable.startswith(PREFIX):
            continue
        key = known.get(variable)
        if key is None:
            log.warning("ignoring unknown setting variable %s", variable)
            continue
        if key == ("rules_dir",):  # read where the CLI reads it, so both agree (an empty value is unset)
            rules_dir = rules_dir_variable(environ)
            if rules_dir is not None:
                sources.set(key, str(rules_dir), variable)
            continue
        try:
            sources.set(key, _env_value(key, raw), variable)
        except ValueError as error:
            sources.problems.append(Problem(variable, None, ".".join(key), str(error)))


def _env_value(key: Key, raw: str) -> Any:
    kind = _kind(key)
    if kind is list and not key[-1].endswith("_file"):
        if raw.lstrip().startswith("["):
            return _parse_structured(raw, list)
        return [item.strip() for item in raw.split(",") if item.strip()]
    if kind is dict:
        return _parse_structured(raw, dict)
    return raw


def _parse_structured(raw: str, kind: type) -> Any:
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = None
    if not isinstance(value, kind):
        example = '{"name": "value"}' if kind is dict else '["a", "b"] or a,b'
        raise ValueError(f"expected {kind.__name__} as JSON/YAML, e.g. {example}")
    return value


def _kind(key: Key) -> type | None:
    model: type[BaseModel] = Settings
    for part in key[:-1]:
        model = model.model_fields[part].annotation  # type: ignore[assignment]
    fields = {spec.alias or name: spec for name, spec in model.model_fields.items()}
    spec = fields.get(key[-1])
    return _origin(spec.annotation) if spec else None


def _origin(annotation: Any) -> type | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _origin(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        kinds = {_origin(arg) for arg in typing.get_args(annotation) if arg is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin in (list, dict):
        return origin  # type: ignore[no-any-return]
    return None


def _read_secret_files(sources: _Sources) -> None:
    for section, name in sorted(SECRETS):
        file_key = (section, f"{name}_file")
        block = sources.data.get(section)
        if not isinstance(block, dict) or file_key[1] not in block:
            continue
        where = sources.origin.get(file_key, "settings")
        path = block.pop(file_key[1])
        if name in block:
            sources.problems.append(Problem(where, None, f"{section}.{name}", f"set both {name} and {name}_file"))
            continue
        try:
            text = Path(str(path)).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
            sources.problems.append(Problem(where, None, f"{section}.{name}_file", f"cannot read {path}: {reason}"))
            continue
        lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        value: Any = lines if _kind((section, name)) is list else text.strip()
        sources.set((section, name), value, f"{where} ({path})")


def _problem(item: Any, sources: _Sources) -> Problem:
    loc: tuple[str | int, ...] = tuple(item["loc"])
    names = tuple(str(part) for part in loc)
    return Problem(sources.where(names), None, describe(loc, None), _message(item, names))


def _message(item: Any, loc: Key) -> str:
    kind = item.get("type", "")
    if kind == "extra_forbidden":
        return "unknown setting"
    if kind == "missing":
        wanted = [(*loc, name) for name in _required(loc)] or [loc]
        names = ", ".join(f"{'.'.join(key)} (or {PREFIX}{'_'.join(key).upper()})" for key in wanted)
        return f"required: set {names}"
    # pydantic's own message, never its `input`: the value may be a secret.
    return str(item.get("msg", "invalid value")).removeprefix("Value error, ")


def _required(loc: Key) -> list[str]:
    """The required fields of the section at `loc` (empty when `loc` is a plain field)."""
    model: Any = Settings
    for part in loc:
        spec = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if spec is None:
            return []
        model = spec.annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    return [spec.alias or name for name, spec in model.model_fields.items() if spec.is_required()]


def dumps(settings: Settings) -> str:
    return json.dumps(settings.redacted(), indent=2, sort_keys=True)
