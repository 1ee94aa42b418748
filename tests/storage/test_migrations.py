"""Versioned migrations on SQLite: applied in order, one transaction each with its version; a
failing one leaves the database where it was; a newer database is refused, naming both versions."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosd.errors import StoreError
from diagnosd.storage import Migration, SQLiteDatabase
from diagnosd.storage.migrations import migrate
from diagnosd.storage.schema import SQLITE_MIGRATIONS as MIGRATIONS

LATEST = len(MIGRATIONS)
NEXT = (
    *MIGRATIONS,
    Migration(LATEST + 1, ("CREATE TABLE notes (name TEXT PRIMARY KEY)", "INSERT INTO notes VALUES ('first')")),
)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    opened = SQLiteDatabase.open(tmp_path / "diagnosd.db")
    yield opened
    opened.close()


def tables(db: SQLiteDatabase) -> set[str]:
    return {name for (name,) in db.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_the_shipped_migrations_count_up_from_one() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, LATEST + 1))


def test_a_new_database_has_every_migration(db: SQLiteDatabase) -> None:
    assert db.schema_version() == LATEST
    assert tables(db) == {"findings", "targets", "alerts", "turns"}
    assert "format" in {row[1] for row in db.rows("PRAGMA table_info(findings)")}


def test_the_next_migration_is_applied_once(db: SQLiteDatabase) -> None:
    assert migrate(db, NEXT) == LATEST + 1
    assert migrate(db, NEXT) == LATEST + 1  # nothing left to do: not applied again
    assert db.schema_version() == LATEST + 1
    assert db.rows("SELECT name FROM notes") == [("first",)]


def test_a_migration_that_fails_leaves_the_database_as_it_was(db: SQLiteDatabase) -> None:
    broken = (*MIGRATIONS, Migration(LATEST + 1, ("CREATE TABLE notes (name TEXT)", "INSERT INTO nowhere VALUES (1)")))
    with pytest.raises(StoreError) as error:
        migrate(db, broken)
    assert error.value.path == db.path
    assert error.value.reason.startswith(
        f"migration to schema version {LATEST + 1} failed: write failed: no such table"
    )
    assert db.schema_version() == LATEST
    assert "notes" not in tables(db)


def test_a_database_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "diagnosd.db"
    newer = SQLiteDatabase.open(path)
    migrate(newer, NEXT)
    newer.close()
    with pytest.raises(StoreError) as error:
        SQLiteDatabase.open(path)
    assert error.value.path == str(path)
    assert error.value.reason == f"schema version {LATEST + 1} is newer than this diagnosd ({LATEST})"


def test_a_diagnosd_from_before_migrations_refuses_a_migrated_database(tmp_path: Path) -> None:
    """It read PRAGMA user_version and refused anything above 1: the same number holds the version."""
    path = tmp_path / "diagnosd.db"
    SQLiteDatabase.open(path).close()
    with sqlite3.connect(path) as raw:
        (version,) = raw.execute("PRAGMA user_version").fetchone()
    raw.close()
    assert version == LATEST > 1
