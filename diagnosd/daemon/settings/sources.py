"""Where settings come from, as pydantic-settings sources: the YAML file, DIAGNOSD_* variables, flags.

Each source also keeps `origins` (the file:line, variable or flag of every key it set) and the
`problems` it met, so the loader can name the source of any error without echoing a value.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import EnvSettingsSource, InitSettingsSource

from diagnosd.daemon.settings.model import Settings
from diagnosd.errors import Problem, SettingsError
from diagnosd.trees.location import rules_dir_variable
from diagnosd.trees.yamlfile import read_yaml

log = logging.getLogger(__name__)

PREFIX = Settings.model_config["env_prefix"]
Key = tuple[str | int, ...]
# The top-level settings that are sections of keys (prometheus, server, ...).
SECTIONS: dict[str, type[BaseModel]] = {
    name: field.annotation
    for name, field in Settings.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
}


def _is_secret(annotation: Any) -> bool:
    return annotation is SecretStr or any(_is_secret(arg) for arg in typing.get_args(annotation))


# (section, key) of every secret, which may be read from `<key>_file` instead: True for a list.
SECRETS = {
    (section, name): typing.get_origin(spec.annotation) is list
    for section, model in SECTIONS.items()
    for name, spec in model.model_fields.items()
    if _is_secret(spec.annotation)
}


def env_names() -> dict[str, Key]:
    """Every DIAGNOSD_* variable and the setting it sets (secrets also as ..._FILE)."""
    names: dict[str, Key] = {f"{PREFIX}{n}".upper(): (n,) for n in Settings.model_fields.keys() - SECTIONS.keys()}
    for section, model in SECTIONS.items():
        for name, spec in model.model_fields.items():
            key = spec.alias or name
            names[f"{PREFIX}{section}_{key}".upper()] = (section, key)
            if (section, name) in SECRETS:
                names[f"{PREFIX}{section}_{key}_FILE".upper()] = (section, f"{key}_file")
    return names


class Given(InitSettingsSource):
    """Settings given as data (the file's, the flags'), with where each key came from."""

    def __init__(self, data: dict[str, Any], origins: dict[Key, str]) -> None:
        self.origins = origins
        self.problems: list[Problem] = []
        _read_secret_files(data, self.origins, self.problems)
        super().__init__(Settings, data)


def file_source(path: Path | None) -> Given:
    """The YAML settings file with the line of every key; SettingsError if it cannot be read."""
    if path is None:
        return Given({}, {})
    try:
        located = read_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise SettingsError([Problem(str(path), None, "", f"cannot read: {error}")]) from None
    except yaml.YAMLError as error:
        # The parser's complaint, never its excerpt of the file (that may hold a secret).
        mark = getattr(error, "problem_mark", None)
        reason = getattr(error, "problem", None) or type(error).__name__
        line = mark.line + 1 if mark else None
        raise SettingsError([Problem(str(path), line, "", f"invalid YAML: {reason}")]) from None
    if not isinstance(located.data, dict | None):
        raise SettingsError([Problem(str(path), 1, "", "the settings file must be a mapping of sections")])
    data = located.data or {}
    # Not a section's own line: that would blame the file for what another source put in it.
    roots = {(name,) for name, value in data.items() if isinstance(value, dict) and name in SECTIONS}
    return Given(data, {key: f"{path}:{line}" for key, line in located.lines.items() if key and key not in roots})


def flag_source(overrides: Mapping[tuple[str, ...], Any]) -> Given:
    """Command-line overrides, keyed by setting: {("server", "port"): 9200}."""
    data: dict[str, Any] = {}
    for key, value in overrides.items():
        node = data
        for part in key[:-1]:
            node = node.setdefault(part, {})
        node[key[-1]] = value
    return Given(data, {key: f"--{key[-1].replace('_', '-')}" for key in overrides})


class EnvironmentSource(EnvSettingsSource):
    """The DIAGNOSD_* variables env_names() knows; others are warned about and left out."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        known = env_names()
        for variable in sorted(environ.keys() - known.keys()):
            if variable.startswith(PREFIX):
                log.warning("ignoring unknown setting variable %s", variable)
        self.variables: dict[str, str] = {}
        for name, value in environ.items():
            if known.get(name) == ("rules_dir",):  # read as the CLI reads it, so both agree (empty: unset)
                if (rules_dir := rules_dir_variable(environ)) is not None:
                    self.variables[name] = str(rules_dir)
            elif name in known:
                self.variables[name] = value
        self.origins: dict[Key, str] = {known[name]: name for name in self.variables}
        self.problems: list[Problem] = []
        super().__init__(Settings, case_sensitive=False)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # The mapping the loader was given, not os.environ (case-insensitive, as the base does).
        return {name.lower(): value for name, value in self.variables.items()}

    def decode_complex_value(self, field_name: str, field: FieldInfo | None, value: Any) -> Any:
        # pydantic-settings decodes JSON only; a list may also be `a,b`, a mapping YAML
        # (`namespace: prod`). What cannot be read goes on as text for validation to refuse.
        text = str(value).strip()
        if field is not None and typing.get_origin(field.annotation) is list and not text.startswith("["):
            return [item.strip() for item in text.split(",") if item.strip()]
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return value

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        _read_secret_files(data, self.origins, self.problems)
        return data


def _read_secret_files(data: dict[str, Any], origins: dict[Key, str], problems: list[Problem]) -> None:
    """Replaces each `<secret>_file: PATH` in `data` by the file's text (lists: one item a line).

    pydantic-settings reads secrets from a directory of files named after the settings; the
    deployment names each file instead (DIAGNOSD_AUTH_API_TOKENS_FILE, bearer_token_file).
    """
    for (section, name), is_list in sorted(SECRETS.items()):
        block = data.get(section)
        if not isinstance(block, dict) or f"{name}_file" not in block:
            continue
        where = origins.get((section, f"{name}_file"), "settings")
        path = block.pop(f"{name}_file")
        if name in block:
            problems.append(Problem(where, None, f"{section}.{name}", f"set both {name} and {name}_file"))
            continue
        try:
            text = Path(str(path)).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else type(error).__name__
            problems.append(Problem(where, None, f"{section}.{name}_file", f"cannot read {path}: {reason}"))
            continue
        lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
        block[name] = lines if is_list else text.strip()
        origins[(section, name)] = f"{where} ({path})"
