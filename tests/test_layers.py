"""The data flow stays one-way: sources → trees → engine → findings → sinks, drivers on top.

A module may import only what its layer allows; the engine in particular does no I/O.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "diagnosd"
NETWORK = {"httpx", "fastapi", "starlette", "uvicorn", "sqlite3", "apscheduler", "socket", "subprocess", "urllib"}
DRIVERS = {"diagnosd.cli", "diagnosd.runtime", "diagnosd.api", "diagnosd.scheduler"}

# layer -> imports it must never make (prefix match)
FORBIDDEN: dict[str, set[str]] = {
    "diagnosd.trees": NETWORK
    | DRIVERS
    | {"diagnosd.engine", "diagnosd.findings", "diagnosd.sources", "diagnosd.sinks"},
    "diagnosd.engine": NETWORK | DRIVERS | {"diagnosd.sinks", "diagnosd.sources.prometheus", "diagnosd.render"},
    "diagnosd.findings": {"httpx", "fastapi", "uvicorn", "apscheduler"}
    | DRIVERS
    | {"diagnosd.engine", "diagnosd.sinks"},
    "diagnosd.render": NETWORK | DRIVERS | {"diagnosd.engine", "diagnosd.sources", "diagnosd.sinks"},
    "diagnosd.sources": DRIVERS | {"diagnosd.engine", "diagnosd.findings", "diagnosd.sinks", "diagnosd.render"},
}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_layer_contract(path: Path) -> None:
    name = module_name(path)
    rules = [banned for layer, banned in FORBIDDEN.items() if name == layer or name.startswith(layer + ".")]
    bad = sorted(
        imported
        for imported in imports(path)
        for banned in rules
        for b in banned
        if imported == b or imported.startswith(b + ".")
    )
    assert bad == [], f"{name} imports {bad}, against the data flow"


def test_every_module_says_its_place_in_a_docstring() -> None:
    missing = [
        module_name(p) for p in MODULES if p.stat().st_size and ast.get_docstring(ast.parse(p.read_text())) is None
    ]
    assert missing == []
