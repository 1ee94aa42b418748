"""Reads a YAML file into plain data plus a map from data path to source line, for precise errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

# libyaml's parser where PyYAML was built with it (10x faster; the same safe subset and marks).
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Located:
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line(self, path: Path) -> int | None:
        """The line of the deepest existing node on `path` (pydantic locs may point below it)."""
        for cut in range(len(path), -1, -1):
            found = self.lines.get(tuple(path[:cut]))
            if found is not None:
                return found
        return None


def read_yaml(text: str) -> Located:
    """Parse YAML (safe subset) keeping each node's 1-based line. Raises yaml.YAMLError."""
    root = yaml.compose(text, Loader=_Loader)
    if root is None:
        return Located(None, {(): 1})
    lines: dict[Path, int] = {}
    _record(root, (), lines)
    return Located(yaml.load(text, Loader=_Loader), lines)


def _record(node: yaml.Node, path: Path, lines: dict[Path, int]) -> None:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = (*path, str(key.value))
            _record(value, child, lines)
            lines[child] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record(item, (*path, index), lines)
