"""Reads Settings from their sources with pydantic-settings: a YAML file < DIAGNOSD_* variables < flags.

Every problem is reported at once, each naming its source (file:line, variable or flag); values are
never echoed, so a secret cannot leak through an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from diagnosd.daemon.settings.model import Settings
from diagnosd.daemon.settings.sources import (
    PREFIX,
    SECTIONS,
    EnvironmentSource,
    Given,
    env_names,
    file_source,
    flag_source,
)
from diagnosd.errors import Problem, SettingsError
from diagnosd.trees.loader import describe

__all__ = ["dumps", "env_names", "load_settings"]

Source = Given | EnvironmentSource


def load_settings(
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[tuple[str, ...], Any] | None = None,
) -> Settings:
    """Settings from the file, the environment and flags; raises SettingsError with every problem."""
    sources = (flag_source(overrides or {}), EnvironmentSource(environ or {}), file_source(config_file))
    try:
        # The first source wins. mypy derives __init__ from the fields; BaseSettings' own takes the sources.
        settings = Settings(_build_sources=(sources, {}))  # type: ignore[call-arg]
    except ValidationError as error:
        raise SettingsError([*_met(sources), *(_problem(item, sources) for item in error.errors())]) from None
    if _met(sources):
        raise SettingsError(_met(sources))
    return settings


def _met(sources: Sequence[Source]) -> list[Problem]:
    """What the sources met reading secret files, the file's first."""
    return [problem for source in reversed(sources) for problem in source.problems]


def _where(loc: tuple[str | int, ...], sources: Sequence[Source]) -> str:
    """The source of the value at `loc`: the first that set it or a key above it."""
    for source in sources:
        for cut in range(len(loc), 0, -1):
            if loc[:cut] in source.origins:
                return source.origins[loc[:cut]]
    return "settings"


def _problem(item: ErrorDetails, sources: Sequence[Source]) -> Problem:
    loc = tuple(item["loc"])
    return Problem(_where(loc, sources), None, describe(loc, None), _message(item, tuple(map(str, loc))))


def _message(item: ErrorDetails, loc: tuple[str, ...]) -> str:
    kind = item["type"]
    if kind == "extra_forbidden":
        return "unknown setting"
    if kind == "missing":
        section = SECTIONS.get(loc[0]) if len(loc) == 1 else None  # a whole section: name what it needs
        fields = section.model_fields.items() if section else ()
        wanted = [(*loc, spec.alias or name) for name, spec in fields if spec.is_required()] or [loc]
        names = ", ".join(f"{'.'.join(key)} (or {PREFIX}{'_'.join(key).upper()})" for key in wanted)
        return f"required: set {names}"
    if kind == "dict_type":
        return 'expected dict, e.g. {"name": "value"} (JSON or YAML in a variable)'
    if kind == "list_type":
        return 'expected list, e.g. ["a", "b"] (or a,b in a variable)'
    # pydantic's own message, never its `input`: the value may be a secret.
    return item["msg"].removeprefix("Value error, ")


def dumps(settings: Settings) -> str:
    return json.dumps(settings.redacted(), indent=2, sort_keys=True)
