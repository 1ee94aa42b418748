"""The PostgreSQL database (psycopg 3), for two or more replicas: one connection in autocommit with
explicit transactions, the shared `?` placeholders spelled `%s`, the schema version in a one-row
table, migrations under an advisory lock. Everything PostgreSQL spells its own way is here or in
schema.py.

Errors name the URL without its credentials. A connection the server dropped is opened again at
the next statement outside a transaction: the statement in flight fails, the replica goes on.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator

import psycopg

from diagnosd.errors import StoreError
from diagnosd.storage.database import Args, Lock, Row
from diagnosd.storage.migrations import migrate
from diagnosd.storage.schema import POSTGRES_MIGRATIONS
from diagnosd.urls import redact, scrub

CONNECT_TIMEOUT = 5
# A statement that waits longer (a lock held by a stuck replica, a server that stopped answering)
# fails instead of stalling the daemon; a URL that sets its own (options=-c statement_timeout=...) wins.
STATEMENT_TIMEOUT = "30s"
# Advisory locks are per database: keyed by (the schema, the Lock), two deployments in one database
# but in schemas of their own do not take each other's turns.
_KEY = "hashtext(current_schema()), ?::int4"
_HELD = (
    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted "
    "AND classid = hashtext(current_schema())::oid AND objid = ?::oid AND objsubid = 2"
)


class PostgresDatabase:
    def __init__(self, url: str) -> None:
        self._url = url
        self.path = redact(url)
        self._db: psycopg.Connection[Row] | None = None
        # How many connections this database has opened (a new one holds no session lock).
        self.generation = 0

    @classmethod
    def open(cls, url: str) -> PostgresDatabase:
        """Connect and migrate; raises StoreError (naming the URL without credentials) saying why not."""
        db = cls(url)
        try:
            db.connection()
            migrate(db, POSTGRES_MIGRATIONS)
        except BaseException:
            db.close()
            raise
        return db

    def connection(self) -> psycopg.Connection[Row]:
        """The open connection, opened (again) if there is none or the server dropped it."""
        if self._db is None or self._db.closed:
            self._db = self._connect()
            self.generation += 1
        return self._db

    def _connect(self) -> psycopg.Connection[Row]:
        try:
            connection = psycopg.connect(
                self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT, application_name="diagnosd"
            )
        except psycopg.Error as error:
            raise self._error("cannot connect", error) from error
        try:
            with connection.cursor() as cursor:
                if cursor.execute("SHOW statement_timeout").fetchone() == ("0",):
                    cursor.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'".encode())
        except psycopg.Error as error:
            connection.close()
            raise self._error("cannot connect", error) from error
        return connection

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        connection = self.connection()
        try:
            with connection.transaction():
                yield
        except psycopg.Error as error:  # the COMMIT itself (a serialization failure, a lost server)
            raise self._error("write failed", error) from error

    def execute(self, sql: str, args: Args = ()) -> int:
        with self._cursor("write failed") as cursor:
            cursor.execute(spelled(sql), tuple(args))
            return cursor.rowcount

    def executemany(self, sql: str, rows: Iterable[Args]) -> None:
        batch = [tuple(row) for row in rows]
        if batch:
            with self._cursor("write failed") as cursor:
                cursor.executemany(spelled(sql), batch)

    def rows(self, sql: str, args: Args = ()) -> list[Row]:
        with self._cursor("read failed") as cursor:
            cursor.execute(spelled(sql), tuple(args))
            return cursor.fetchall()

    def json_text(self, column: str, key: str) -> tuple[str, object]:
        # The columns hold JSON as text (as on SQLite); `->>` reads a key without any path syntax.
        return f"({column}::jsonb ->> ?::text)", key

    def lock_schema(self) -> None:
        # Released with the transaction: two replicas starting at once migrate one after the other,
        # and the second finds the version already there.
        self.rows(f"SELECT pg_advisory_xact_lock({_KEY})", (int(Lock.SCHEMA),))

    def hold(self, lock: Lock) -> bool:
        # A session lock, gone with the connection: a replica that dies (or loses the database)
        # leaves it to the next that asks. Asked again while held, it is not taken twice (CASE).
        [(held,)] = self.rows(
            f"SELECT CASE WHEN EXISTS ({_HELD}) THEN true ELSE pg_try_advisory_lock({_KEY}) END", (int(lock), int(lock))
        )
        return bool(held)

    def schema_version(self) -> int:
        # A scan of the catalog under this statement's snapshot, not to_regclass(): its name lookup
        # may answer from a cache that has not yet heard of the table another replica just made.
        [(exists,)] = self.rows(
            "SELECT count(*) FROM pg_catalog.pg_tables "
            "WHERE schemaname = current_schema() AND tablename = 'diagnosd_schema'"
        )
        if not exists:
            return 0
        found = self.rows("SELECT version FROM diagnosd_schema")
        return int(found[0][0]) if found else 0

    def set_schema_version(self, version: int) -> None:
        # Created by the first migration's transaction, under its lock; `one` keeps it one row.
        self.execute(
            "CREATE TABLE IF NOT EXISTS diagnosd_schema "
            "(one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), version INTEGER NOT NULL)"
        )
        self.execute(
            "INSERT INTO diagnosd_schema (version) VALUES (?) "
            "ON CONFLICT (one) DO UPDATE SET version = excluded.version",
            (int(version),),
        )

    def probe(self) -> str:
        [(version,)] = self.rows("SHOW server_version")
        return f"postgresql {version}"

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    @contextlib.contextmanager
    def _cursor(self, what: str) -> Iterator[psycopg.Cursor[Row]]:
        try:
            with self.connection().cursor() as cursor:
                yield cursor
        except psycopg.Error as error:
            raise self._error(what, error) from error

    def _error(self, what: str, error: psycopg.Error) -> StoreError:
        # libpq's messages name hosts and users, not passwords; scrub in case one quotes the URL.
        return StoreError(self.path, scrub(f"{what}: {str(error).strip()}", self._url))


@functools.lru_cache(maxsize=512)
def spelled(sql: str) -> bytes:
    """`sql` in psycopg's placeholders: each `?` outside quotes becomes `%s`, every `%` becomes `%%`."""
    out: list[str] = []
    quote: str | None = None
    for char in sql:
        if quote is not None:
            quote = None if char == quote else quote  # '' inside a literal closes and reopens it
        elif char in "'\"":
            quote = char
        elif char == "?":
            out.append("%s")
            continue
        out.append("%%" if char == "%" else char)
    return "".join(out).encode()
