"""The SQLite database's own: WAL on disk, and errors for a file it cannot use that name the file and
say why. (What every backend does is tests/storage/test_database.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosd.errors import StoreError
from diagnosd.storage import SQLiteDatabase, open_database
from diagnosd.storage.database import Lock


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SQLiteDatabase]:
    opened = SQLiteDatabase.open(tmp_path / "sub" / "diagnosd.db")
    yield opened
    opened.close()


def test_on_disk_it_writes_ahead_and_syncs_at_checkpoints(db: SQLiteDatabase, tmp_path: Path) -> None:
    assert (tmp_path / "sub" / "diagnosd.db").is_file()  # its directory made for it
    assert db.probe() == "journal wal"
    assert db.rows("PRAGMA synchronous") == [(1,)]  # NORMAL


def test_one_process_on_its_file_holds_the_rounds(db: SQLiteDatabase) -> None:
    assert db.hold(Lock.ROUNDS)


def test_a_failed_write_says_what_sqlite_said(db: SQLiteDatabase) -> None:
    db.execute("CREATE TABLE notes (name TEXT PRIMARY KEY)")
    db.execute("INSERT INTO notes VALUES (?)", ("a",))
    with pytest.raises(StoreError) as error:
        db.execute("INSERT INTO notes VALUES (?)", ("a",))
    assert (error.value.path, error.value.reason) == (db.path, "write failed: UNIQUE constraint failed: notes.name")


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
