"""Loads rules/: the catalog and one tree per YAML file, completely or with every problem at once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from diagnosd.errors import Problem, RulesError
from diagnosd.trees import semantics
from diagnosd.trees.aliases import ALIASES_FILE, Aliases, load_aliases
from diagnosd.trees.catalog import CATALOG_FILE, Catalog
from diagnosd.trees.model import Tree
from diagnosd.trees.yamlfile import Located, read_yaml

TAGS = {"check", "manual", "group"}
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class RuleSet:
    """Validated trees in catalog order, with the catalog they were checked against and the metric
    rename groups (rules/metrics.yaml) their selectors are resolved through."""

    catalog: Catalog
    trees: dict[str, Tree]
    files: dict[str, Path]
    aliases: Aliases = field(default_factory=Aliases)

    def tree(self, symptom: str) -> Tree | None:
        return self.trees.get(symptom)


def load_rules(directory: Path) -> RuleSet:
    """Load and validate every tree in `directory`; raise RulesError listing all problems."""
    problems: list[Problem] = []
    catalog = _load_catalog(directory, problems)
    trees: dict[str, Tree] = {}
    files: dict[str, Path] = {}
    for path in sorted(directory.glob("*.yaml")):
        if path.name in (CATALOG_FILE, ALIASES_FILE) or path.name.endswith(".test.yaml"):
            continue
        tree = _load_tree(path, catalog, problems)
        if tree is not None:
            trees[tree.id] = tree
            files[tree.id] = path
    if catalog is not None:
        problems.extend(semantics.check_catalog_coverage(catalog, trees, files))
    aliases = Aliases()
    try:
        aliases = load_aliases(directory)
    except RulesError as error:
        problems.extend(error.problems)
    if problems:
        raise RulesError(problems)
    assert catalog is not None
    order = {s.id: i for i, s in enumerate(catalog.symptoms)}
    ordered = dict(sorted(trees.items(), key=lambda item: order.get(item[0], len(order))))
    return RuleSet(catalog=catalog, trees=ordered, files=files, aliases=aliases)


def _load_catalog(directory: Path, problems: list[Problem]) -> Catalog | None:
    path = directory / CATALOG_FILE
    if not path.is_file():
        problems.append(Problem(str(path), None, "", "catalog file is missing"))
        return None
    return _parse(path, Catalog, problems)


def _load_tree(path: Path, catalog: Catalog | None, problems: list[Problem]) -> Tree | None:
    tree = _parse(path, Tree, problems)
    if tree is None:
        return None
    located = _read(path, [])
    found = list(semantics.check_tree(tree, path.stem, catalog))
    for loc, message in found:
        line = located.line(loc) if located else None
        problems.append(Problem(str(path), line, describe(loc, located.data if located else None), message))
    return None if found else tree


def _parse(path: Path, model: type[M], problems: list[Problem]) -> M | None:
    located = _read(path, problems)
    if located is None:
        return None
    try:
        return model.model_validate(located.data)
    except ValidationError as error:
        for item in error.errors():
            loc = data_path(item["loc"])
            problems.append(Problem(str(path), located.line(loc), describe(loc, located.data), _message(item)))
        return None


def _read(path: Path, problems: list[Problem]) -> Located | None:
    try:
        return read_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        problems.append(Problem(str(path), None, "", f"cannot read: {error}"))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problems.append(Problem(str(path), line, "", f"invalid YAML: {error}"))
    return None


def data_path(loc: tuple[Any, ...]) -> tuple[str | int, ...]:
    """A pydantic loc without the union tags pydantic inserts after list indexes."""
    out: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and part in TAGS and out and isinstance(out[-1], int):
            continue
        out.append(part)
    return tuple(out)


def describe(loc: tuple[str | int, ...], data: Any) -> str:
    """`nodes[1](prefix_cache_hit_drop).compare`: indexes named by the node id where there is one."""
    parts: list[str] = []
    for part in _walk(loc, data):
        parts.append(part)
    return "".join(parts).lstrip(".")


def _walk(loc: tuple[str | int, ...], data: Any) -> Iterator[str]:
    current = data
    for part in loc:
        if isinstance(part, int):
            item = current[part] if isinstance(current, list) and part < len(current) else None
            label = item.get("id") if isinstance(item, dict) else None
            yield f"[{part}]" + (f"({label})" if isinstance(label, str) else "")
            current = item
        else:
            yield f".{part}"
            current = current.get(part) if isinstance(current, dict) else None


def _message(item: Any) -> str:
    kind = item.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    return str(item.get("msg", "invalid value"))
