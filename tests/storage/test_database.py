"""The Database contract on each backend (SQLite, PostgreSQL): transactions that commit or leave
nothing, the shared SQL with `?` placeholders, JSON text matched by a key, and errors that name
the database and say why."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from diagnosd.errors import StoreError
from diagnosd.storage import Database, open_database
from diagnosd.storage.sql import upsert


@pytest.fixture
def db(database_location: Path | str) -> Iterator[Database]:
    opened = open_database(database_location)
    opened.execute("CREATE TABLE notes (name TEXT PRIMARY KEY, body TEXT NOT NULL)")
    yield opened
    opened.close()


def names(db: Database) -> list[str]:
    return [name for (name,) in db.rows("SELECT name FROM notes ORDER BY name")]


def test_a_transaction_commits_what_it_wrote(db: Database, database_location: Path | str) -> None:
    with db.transaction():
        assert db.execute("INSERT INTO notes VALUES (?, ?)", ("a", "1")) == 1
        db.executemany("INSERT INTO notes VALUES (?, ?)", [("b", "2"), ("c", "3")])
    other = open_database(database_location)  # another connection sees it: committed
    try:
        assert names(other) == ["a", "b", "c"]
    finally:
        other.close()


def write_twice(db: Database, first: str, second: str) -> None:
    """Two rows in one transaction; the second one fails when it takes the first one's name."""
    with db.transaction():
        db.execute("INSERT INTO notes VALUES (?, ?)", (first, "1"))
        if second == first:
            db.execute("INSERT INTO notes VALUES (?, ?)", (second, "again"))
        else:
            raise KeyError(second)


def test_a_failed_write_leaves_nothing_and_names_the_database(db: Database) -> None:
    with pytest.raises(StoreError) as error:
        write_twice(db, "a", "a")
    assert error.value.path == db.path
    assert error.value.reason.startswith("write failed: ")
    assert "unique" in error.value.reason.lower()
    assert names(db) == []
    with db.transaction():  # the failed one is over: the next one starts
        db.execute("INSERT INTO notes VALUES (?, ?)", ("b", "2"))
    assert db.rows("SELECT * FROM notes") == [("b", "2")]


def test_an_error_of_the_caller_rolls_back_too(db: Database) -> None:
    with pytest.raises(KeyError):
        write_twice(db, "a", "b")
    assert names(db) == []


def test_a_bad_read_is_a_store_error(db: Database) -> None:
    with pytest.raises(StoreError) as error:
        db.rows("SELECT * FROM missing")
    assert error.value.path == db.path
    assert error.value.reason.startswith("read failed: ")
    assert "missing" in error.value.reason


def test_a_json_field_is_matched_by_its_text(db: Database) -> None:
    tricky = 'vllm-"1"\\ü.$[0]'  # quotes, a backslash, and what a JSON path would read as syntax
    db.execute("INSERT INTO notes VALUES (?, ?)", ("a", json.dumps({"pod": tricky, "a.b": "dotted"})))
    expression, key = db.json_text("body", "pod")
    assert db.rows(f"SELECT name FROM notes WHERE {expression} = ?", (key, tricky)) == [("a",)]
    assert db.rows(f"SELECT name FROM notes WHERE {expression} = ?", (key, "vllm-1")) == []
    expression, key = db.json_text("body", "a.b")
    assert db.rows(f"SELECT name FROM notes WHERE {expression} = ?", (key, "dotted")) == [("a",)]


def test_question_marks_and_percent_signs_inside_literals_are_text(db: Database) -> None:
    db.execute("INSERT INTO notes VALUES ('what?', '100% ''sure''?')")
    assert db.rows("SELECT body FROM notes WHERE name = 'what?' AND body LIKE ?", ("100%",)) == [("100% 'sure'?",)]


def test_an_upsert_replaces_all_but_the_key(db: Database) -> None:
    statement = upsert("notes", ("name", "body"), key=("name",))
    db.execute(statement, ("a", "first"))
    db.executemany(statement, [("a", "second"), ("b", "other")])
    assert db.rows("SELECT name, body FROM notes ORDER BY name") == [("a", "second"), ("b", "other")]


def test_a_limited_delete_by_primary_key_counts_its_rows(db: Database) -> None:
    """The retention's shape: row values IN a limited subquery, and the number of rows it took."""
    db.executemany("INSERT INTO notes VALUES (?, ?)", [(f"n{i}", "old") for i in range(5)])
    chunk = "DELETE FROM notes WHERE (name, body) IN (SELECT name, body FROM notes WHERE body = ? LIMIT ?)"
    assert [db.execute(chunk, ("old", 2)) for _ in range(4)] == [2, 2, 1, 0]


def test_the_probe_says_what_answered(db: Database) -> None:
    assert db.probe().split()[0] in {"journal", "postgresql"}
