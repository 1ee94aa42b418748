"""The database the stores are written against: transactions, statements and rows, nothing of any
one backend. SQLite (sqlite.py) and PostgreSQL (postgres.py) implement it, each with its own spelling
of what differs (placeholders, the JSON operator, the schema version, its lock) inside it.

Statements are written with `?` placeholders in the SQL both backends share; a backend whose
driver spells parameters otherwise translates them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from enum import IntEnum
from typing import Any, Protocol

Row = tuple[Any, ...]
Args = Sequence[object]


class Lock(IntEnum):
    """What the processes sharing one database take turns at."""

    SCHEMA = 1  # migrating it: for one transaction (lock_schema)
    ROUNDS = 2  # the scheduler's rounds: for as long as the process holding it lives (hold)


class Database(Protocol):
    # What errors name: a file path, or a URL without its credentials.
    path: str

    def transaction(self) -> AbstractContextManager[None]:
        """One write transaction: committed on leaving, rolled back on an error (a StoreError)."""
        ...

    def execute(self, sql: str, args: Args = ()) -> int:
        """Run one statement; returns the rows it changed. Raises StoreError."""
        ...

    def executemany(self, sql: str, rows: Iterable[Args]) -> None: ...

    def rows(self, sql: str, args: Args = ()) -> list[Row]:
        """The rows a query returns. Raises StoreError."""
        ...

    def json_text(self, column: str, key: str) -> tuple[str, object]:
        """An SQL expression for the text under `key` of a JSON object column, and its argument."""
        ...

    def schema_version(self) -> int:
        """The last migration applied (0 for an empty database)."""
        ...

    def lock_schema(self) -> None:
        """Inside a migration's transaction: wait until no other process migrates, hold it to the end."""
        ...

    def set_schema_version(self, version: int) -> None:
        """Record `version` as applied, inside the migration's transaction."""
        ...

    def hold(self, lock: Lock) -> bool:
        """Whether this process holds `lock` among all on this database, taking it if it is free.
        Held until the database is closed or its connection is lost; raises StoreError."""
        ...

    def probe(self) -> str:
        """One round trip, described for the readiness check (SQLite: its journal mode; PostgreSQL: its version)."""
        ...

    def close(self) -> None: ...
