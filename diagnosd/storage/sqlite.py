"""The SQLite database (stdlib sqlite3): WAL with synchronous=NORMAL, write transactions that take
the lock at once, the schema version in `PRAGMA user_version`. Everything SQLite spells its own way
is here or in schema.py.

Used from the event loop's thread only: statements are small and indexed, and WAL with
synchronous=NORMAL commits without an fsync.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path

from diagnosd.errors import StoreError
from diagnosd.storage.database import Args, Lock, Row
from diagnosd.storage.migrations import migrate
from diagnosd.storage.schema import SQLITE_MIGRATIONS

MEMORY = ":memory:"


class SQLiteDatabase:
    def __init__(self, connection: sqlite3.Connection, path: str) -> None:
        self._db = connection
        self.path = path

    @classmethod
    def open(cls, path: Path | str) -> SQLiteDatabase:
        """Open (creating, migrating) the database; raises StoreError saying why it cannot."""
        where = str(path)
        try:
            if where != MEMORY:
                Path(where).parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: no implicit transactions, ours are explicit (transaction()).
            connection = sqlite3.connect(where, isolation_level=None, timeout=5.0)
        except (OSError, sqlite3.Error) as error:
            raise StoreError(where, f"cannot open: {error}") from error
        db = cls(connection, where)
        try:
            db._prepare()
            migrate(db, SQLITE_MIGRATIONS)
        except BaseException:
            connection.close()
            raise
        return db

    def _prepare(self) -> None:
        try:
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self._db.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as error:
            raise StoreError(self.path, f"not a usable diagnosd store: {error}") from error
        if self.path != MEMORY and str(mode).lower() != "wal":
            raise StoreError(self.path, f"cannot use write-ahead logging (journal_mode={mode})")

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        # IMMEDIATE takes the write lock now: a second process waits here (up to the timeout)
        # instead of failing at its first write.
        self._run("BEGIN IMMEDIATE")
        try:
            yield
            self._run("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def execute(self, sql: str, args: Args = ()) -> int:
        try:
            return self._db.execute(sql, args).rowcount
        except sqlite3.Error as error:
            raise StoreError(self.path, f"write failed: {error}") from error

    def executemany(self, sql: str, rows: Iterable[Args]) -> None:
        try:
            self._db.executemany(sql, rows)
        except sqlite3.Error as error:
            raise StoreError(self.path, f"write failed: {error}") from error

    def rows(self, sql: str, args: Args = ()) -> list[Row]:
        try:
            return self._db.execute(sql, args).fetchall()
        except sqlite3.Error as error:
            raise StoreError(self.path, f"read failed: {error}") from error

    def json_text(self, column: str, key: str) -> tuple[str, object]:
        # A quoted key: label names may hold what a JSON path would otherwise read as syntax.
        return f"json_extract({column}, ?)", f'$."{key}"'

    def lock_schema(self) -> None:
        # BEGIN IMMEDIATE already holds the write lock: no other process migrates meanwhile.
        pass

    def schema_version(self) -> int:
        return int(self.rows("PRAGMA user_version")[0][0])

    def set_schema_version(self, version: int) -> None:
        # PRAGMA takes no parameters; the int() keeps it a number. Inside the migration's
        # transaction the header change commits or rolls back with the schema's. A diagnosd from
        # before versioned migrations reads this same number, so it refuses a newer store too.
        self.execute(f"PRAGMA user_version = {int(version)}")

    def hold(self, lock: Lock) -> bool:
        # One file on one volume: one process, which holds every lock there is.
        return True

    def journal_mode(self) -> str:
        return str(self.rows("PRAGMA journal_mode")[0][0])

    def probe(self) -> str:
        return f"journal {self.journal_mode()}"

    def close(self) -> None:
        self._db.close()

    def _rollback(self) -> None:
        # A COMMIT that failed (busy, disk full) leaves the transaction open: end it, or the
        # next BEGIN fails too. What ROLLBACK says then adds nothing to the error being raised.
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _run(self, statement: str) -> None:
        try:
            self._db.execute(statement)
        except sqlite3.Error as error:
            raise StoreError(self.path, f"write failed: {error}") from error
