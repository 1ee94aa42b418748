"""Metric rename groups (rules/metrics.yaml): names that mean the same thing across releases.

A selector naming any member of a group is resolved to whichever members a Prometheus has;
the colon/underscore twin of every name (reference trap 1) is always a member too.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml
from pydantic import Field, ValidationError

from diagnosd.errors import Problem, RulesError
from diagnosd.trees.model import Strict

ALIASES_FILE = "metrics.yaml"


class AliasGroup(Strict):
    names: list[str] = Field(min_length=2)
    note: str


class AliasFile(Strict):
    aliases: list[AliasGroup]


class Aliases:
    """name -> every spelling that may carry the same series, the name itself first."""

    def __init__(self, groups: Iterable[AliasGroup] = ()) -> None:
        self._group: dict[str, tuple[str, ...]] = {}
        for group in groups:
            for name in group.names:
                self._group[name] = tuple(group.names)

    def variants(self, name: str) -> tuple[str, ...]:
        base = self._group.get(name, (name,))
        ordered = [name, *(n for n in base if n != name)]
        with_twins: list[str] = []
        for candidate in ordered:
            with_twins.append(candidate)
            if ":" in candidate:
                with_twins.append(candidate.replace(":", "_"))
        return tuple(dict.fromkeys(with_twins))

    def newest_first(self, name: str) -> tuple[str, ...]:
        """The same spellings as `variants`, newest first: the group's order in metrics.yaml, each
        name followed by its underscore twin. Where several are present, the first one wins."""
        return self.variants(self._group.get(name, (name,))[0])


def load_aliases(rules_dir: Path) -> Aliases:
    path = rules_dir / ALIASES_FILE
    if not path.is_file():
        return Aliases()
    try:
        parsed = AliasFile.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
    except (yaml.YAMLError, ValidationError) as error:
        raise RulesError([Problem(str(path), None, "", str(error))]) from error
    return Aliases(parsed.aliases)
