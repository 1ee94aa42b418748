"""Where diagnosd looks for its trees: $DIAGNOSD_RULES_DIR, read in one place, else the package diagnosd.rules."""

from __future__ import annotations

import ast
import zipfile
from importlib.abc import Traversable
from pathlib import Path

import pytest

from diagnosd.daemon import compose
from diagnosd.daemon.settings.loader import load_settings
from diagnosd.trees import load_rules, location
from tests.conftest import REPO, RULES

PROMETHEUS = {"DIAGNOSD_PROMETHEUS_URL": "http://127.0.0.1:9090"}


def test_from_the_checkout_the_shipped_trees_are_its_rules_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(location.RULES_ENV, raising=False)
    assert location.shipped_rules_dir().resolve() == RULES.resolve()
    assert compose.default_rules_dir() == location.shipped_rules_dir()


def test_the_variable_wins_and_empty_means_unset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(location.RULES_ENV, str(tmp_path))
    assert compose.default_rules_dir() == tmp_path
    monkeypatch.setenv(location.RULES_ENV, "")
    assert compose.default_rules_dir() == location.shipped_rules_dir()
    assert location.rules_dir_variable({}) is None


def test_the_settings_read_the_variable_the_same_way(tmp_path: Path) -> None:
    assert load_settings(None, PROMETHEUS | {location.RULES_ENV: str(tmp_path)}).rules_dir == tmp_path
    assert load_settings(None, PROMETHEUS | {location.RULES_ENV: ""}).rules_dir is None  # not the working directory
    file = tmp_path / "settings.yaml"
    file.write_text(f"rules_dir: {tmp_path / 'from-file'}\n")
    assert load_settings(file, PROMETHEUS | {location.RULES_ENV: str(tmp_path)}).rules_dir == tmp_path


def test_only_one_module_names_the_variable() -> None:
    """Its name as a string, or RULES_ENV, only in diagnosd.trees.location (the settings ask rules_dir_variable)."""
    naming = []
    for path in sorted((REPO / "diagnosd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = isinstance(node, ast.Constant) and node.value == location.RULES_ENV
            uses = isinstance(node, ast.Name | ast.Attribute | ast.alias) and "RULES_ENV" in ast.dump(node)
            if names or uses:
                naming.append(path.relative_to(REPO).as_posix())
    assert set(naming) == {"diagnosd/trees/location.py"}


def test_trees_in_a_zip_are_extracted_once_to_a_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    archive = tmp_path / "diagnosd.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in RULES.iterdir():
            out.write(path, f"diagnosd/rules/{path.name}")

    def files(package: str) -> Traversable:
        assert package == location.RULES_PACKAGE
        return zipfile.Path(archive, "diagnosd/rules/")

    monkeypatch.setattr(location.resources, "files", files)
    directory = location.shipped_rules_dir.__wrapped__()
    assert directory.is_dir()
    assert sorted(p.name for p in directory.iterdir()) == sorted(p.name for p in RULES.glob("*.yaml"))
    assert len(load_rules(directory).trees) == 20


def test_a_source_tree_never_installed_uses_its_own_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    def files(package: str) -> Traversable:
        raise ModuleNotFoundError(package)

    monkeypatch.setattr(location.resources, "files", files)
    assert location.shipped_rules_dir.__wrapped__() == RULES
