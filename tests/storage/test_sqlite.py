"""The SQLite database: WAL on disk, write transactions that commit or leave nothing, and errors that
name the file and say why."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosd.errors import StoreError
from diagnosd.storage import SQLiteDatabase, open_database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    opened = SQLiteDatabase.open(tmp_path / "sub" / "diagnosd.db")
    opened.execute("CREATE TABLE notes (name TEXT PRIMARY KEY, body TEXT NOT NULL)")
    yield opened
    opened.close()


def test_on_disk_it_writes_ahead_and_syncs_at_checkpoints(db: SQLiteDatabase) -> None:
    assert db.probe() == "journal wal"
    assert db.rows("PRAGMA synchronous") == [(1,)]  # NORMAL


def test_a_transaction_commits_what_it_wrote(db: SQLiteDatabase, tmp_path: Path) -> None:
    with db.transaction():
        assert db.execute("INSERT INTO notes VALUES (?, ?)", ("a", "1")) == 1
        db.executemany("INSERT INTO notes VALUES (?, ?)", [("b", "2"), ("c", "3")])
    other = sqlite3.connect(tmp_path / "sub" / "diagnosd.db")
    try:
        assert other.execute("SELECT name FROM notes ORDER BY name").fetchall() == [("a",), ("b",), ("c",)]
    finally:
        other.close()


def write_twice(db: SQLiteDatabase, first: str, second: str) -> None:
    """Two rows in one transaction; the second one fails when it takes the first one's name."""
    with db.transaction():
        db.execute("INSERT INTO notes VALUES (?, ?)", (first, "1"))
        if second == first:
            db.execute("INSERT INTO notes VALUES (?, ?)", (second, "again"))
        else:
            raise KeyError(second)


def test_a_failed_write_leaves_nothing_and_names_the_file(db: SQLiteDatabase) -> None:
    with pytest.raises(StoreError) as error:
        write_twice(db, "a", "a")
    assert error.value.path == db.path
    assert error.value.reason.startswith("write failed: UNIQUE constraint failed")
    assert db.rows("SELECT * FROM notes") == []
    with db.transaction():  # the failed one is over: the next one starts
        db.execute("INSERT INTO notes VALUES (?, ?)", ("b", "2"))
    assert db.rows("SELECT * FROM notes") == [("b", "2")]


def test_an_error_of_the_caller_rolls_back_too(db: SQLiteDatabase) -> None:
    with pytest.raises(KeyError):
        write_twice(db, "a", "b")
    assert db.rows("SELECT * FROM notes") == []


def test_a_bad_read_is_a_store_error(db: SQLiteDatabase) -> None:
    with pytest.raises(StoreError, match="read failed: no such table: missing"):
        db.rows("SELECT * FROM missing")


def test_a_json_field_is_matched_by_its_text(db: SQLiteDatabase) -> None:
    tricky = 'vllm-"1"\\ü'
    db.execute("INSERT INTO notes VALUES (?, ?)", ("a", json.dumps({"pod": tricky})))
    expression, key = db.json_text("body", "pod")
    assert db.rows(f"SELECT name FROM notes WHERE {expression} = ?", (key, tricky)) == [("a",)]
    assert db.rows(f"SELECT name FROM notes WHERE {expression} = ?", (key, "vllm-1")) == []


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all, " * 100)
    with pytest.raises(StoreError) as error:
        open_database(path)
    assert error.value.path == str(path)
    assert error.value.reason == "not a usable diagnosd store: file is not a database"


def test_a_path_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot open"):
        open_database(blocker / "diagnosd.db")
