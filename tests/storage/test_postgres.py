"""The PostgreSQL database's own, on a real server: migrations from empty, once each, refused when the
schema is newer, one at a time when two replicas start together; errors that name the URL without
its credentials; a connection the server dropped opened again; the rounds lock one replica holds
until it is gone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from diagnosd.errors import StoreError
from diagnosd.promlocal import free_port
from diagnosd.storage import Migration, open_database
from diagnosd.storage.database import Lock
from diagnosd.storage.migrations import migrate
from diagnosd.storage.postgres import PostgresDatabase, spelled
from diagnosd.storage.schema import POSTGRES_MIGRATIONS
from diagnosd.urls import redact
from tests.postgres import PASSWORD, PASSWORD_ROLE, LocalPostgres

LATEST = len(POSTGRES_MIGRATIONS)
# No primary key: a migration applied twice would leave two rows.
NEXT = (
    *POSTGRES_MIGRATIONS,
    Migration(LATEST + 1, ("CREATE TABLE notes (name TEXT)", "INSERT INTO notes VALUES ('first')")),
)


@pytest.fixture
def db(postgres_url: str) -> Iterator[PostgresDatabase]:
    opened = PostgresDatabase.open(postgres_url)
    yield opened
    opened.close()


def tables(db: PostgresDatabase) -> set[str]:
    rows = db.rows("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
    return {name for (name,) in rows}


def test_an_empty_database_gets_every_migration(db: PostgresDatabase) -> None:
    assert db.schema_version() == LATEST
    assert tables(db) == {"findings", "targets", "alerts", "turns", "diagnosd_schema"}
    assert db.rows("SELECT version FROM diagnosd_schema") == [(LATEST,)]  # one row
    assert db.probe().startswith("postgresql 1")


def test_the_next_migration_is_applied_once(db: PostgresDatabase) -> None:
    assert migrate(db, NEXT) == LATEST + 1
    assert migrate(db, NEXT) == LATEST + 1
    assert db.rows("SELECT version FROM diagnosd_schema") == [(LATEST + 1,)]
    assert db.rows("SELECT name FROM notes") == [("first",)]


def test_a_migration_that_fails_leaves_the_database_as_it_was(db: PostgresDatabase) -> None:
    """PostgreSQL's DDL is transactional: the table the failed migration made goes with it."""
    broken = (*POSTGRES_MIGRATIONS, Migration(LATEST + 1, ("CREATE TABLE notes (name TEXT)", "INSERT INTO nowhere")))
    with pytest.raises(StoreError) as error:
        migrate(db, broken)
    assert error.value.path == db.path
    assert error.value.reason.startswith(f"migration to schema version {LATEST + 1} failed: write failed: ")
    assert db.schema_version() == LATEST
    assert "notes" not in tables(db)


def test_a_database_newer_than_the_code_is_refused(db: PostgresDatabase, postgres_url: str) -> None:
    migrate(db, NEXT)
    with pytest.raises(StoreError) as error:
        open_database(postgres_url)
    assert error.value.path == redact(postgres_url)
    assert error.value.reason == f"schema version {LATEST + 1} is newer than this diagnosd ({LATEST})"


def waiting_for_locks(watcher: PostgresDatabase, count: int) -> None:
    """Until `count` sessions wait for an advisory lock (PostgreSQL signals nothing: ask it)."""
    deadline = time.monotonic() + 30
    sql = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    while watcher.rows(sql) != [(count,)]:
        assert time.monotonic() < deadline, f"{count} sessions never waited for the schema lock"
        time.sleep(0.01)


def test_two_replicas_starting_at_once_migrate_one_after_the_other(postgres_url: str) -> None:
    """Both find an empty database, both wait for the schema lock, each migration runs once."""
    holder, watcher = PostgresDatabase(postgres_url), PostgresDatabase(postgres_url)
    replicas = [PostgresDatabase(postgres_url) for _ in range(2)]
    reached: list[int | BaseException] = []

    def start(replica: PostgresDatabase) -> None:
        try:
            reached.append(migrate(replica, NEXT))
        except BaseException as error:  # handed to the test's thread
            reached.append(error)

    threads = [threading.Thread(target=start, args=(replica,)) for replica in replicas]
    try:
        with holder.transaction():
            holder.lock_schema()
            for thread in threads:
                thread.start()
            waiting_for_locks(watcher, 2)
        for thread in threads:
            thread.join(timeout=60)
        assert reached == [LATEST + 1, LATEST + 1]
        assert watcher.rows("SELECT name FROM notes") == [("first",)]
        assert watcher.rows("SELECT version FROM diagnosd_schema") == [(LATEST + 1,)]
    finally:
        for database in (holder, watcher, *replicas):
            database.close()


def test_a_wrong_password_is_refused_without_showing_it(postgres_server: LocalPostgres) -> None:
    wrong = postgres_server.fresh_url(user=PASSWORD_ROLE, password="not-" + PASSWORD)
    with pytest.raises(StoreError) as error:
        open_database(wrong)
    assert error.value.path == redact(wrong)
    assert error.value.path.startswith("postgresql://***@127.0.0.1:")
    assert "password authentication failed" in error.value.reason
    assert PASSWORD not in str(error.value)
    right = open_database(postgres_server.fresh_url(user=PASSWORD_ROLE, password=PASSWORD))
    assert right.schema_version() == LATEST
    assert PASSWORD not in right.path
    right.close()


def test_a_missing_database_names_it_not_the_password(postgres_server: LocalPostgres) -> None:
    url = postgres_server.url("nowhere", user=PASSWORD_ROLE, password=PASSWORD)
    with pytest.raises(StoreError) as error:
        open_database(url)
    assert 'database "nowhere" does not exist' in error.value.reason
    assert PASSWORD not in str(error.value)


def test_a_dead_server_is_a_store_error_naming_the_url_without_credentials() -> None:
    url = f"postgresql://diagnosd:{PASSWORD}@127.0.0.1:{free_port()}/diagnosd"
    with pytest.raises(StoreError) as error:
        open_database(url)
    assert error.value.path == f"postgresql://***@{url.rpartition('@')[2]}"
    assert error.value.reason.startswith("cannot connect: ")
    assert "refused" in error.value.reason
    assert PASSWORD not in str(error.value)


def test_a_connection_the_server_dropped_is_opened_again(db: PostgresDatabase, postgres_server: LocalPostgres) -> None:
    [(pid,)] = db.rows("SELECT pg_backend_pid()")
    postgres_server.admin(f"SELECT pg_terminate_backend({int(pid)})")
    with pytest.raises(StoreError) as error:  # the statement in flight fails...
        db.rows("SELECT 1")
    assert error.value.reason.startswith("read failed: ")
    assert db.rows("SELECT 1") == [(1,)]  # ...the next one has a new connection
    assert db.generation == 2
    assert db.schema_version() == LATEST


def kill(server: LocalPostgres, db: PostgresDatabase) -> None:
    """What a crash of the replica does to its session: the server ends it (and waits for that)."""
    [(pid,)] = db.rows("SELECT pg_backend_pid()")
    server.admin(f"SELECT pg_terminate_backend({int(pid)}, 10000)")


def test_one_replica_holds_the_rounds_until_it_is_gone(
    db: PostgresDatabase, postgres_url: str, postgres_server: LocalPostgres
) -> None:
    other = PostgresDatabase(postgres_url)  # a second replica's connection
    try:
        assert [db.hold(Lock.ROUNDS) for _ in range(3)] == [True] * 3
        assert not other.hold(Lock.ROUNDS)
        kill(postgres_server, db)
        assert other.hold(Lock.ROUNDS)  # the survivor takes over
        with pytest.raises(StoreError):  # the first one learns its session is gone...
            db.hold(Lock.ROUNDS)
        assert not db.hold(Lock.ROUNDS)  # ...and back on a new connection, waits its turn
        assert db.generation == 2
    finally:
        other.close()


def test_holding_again_takes_the_lock_once(db: PostgresDatabase, postgres_url: str) -> None:
    """Asked every round, it must not pile up: one unlock gives it up."""
    other = PostgresDatabase(postgres_url)
    try:
        for _ in range(3):
            assert db.hold(Lock.ROUNDS)
        assert db.rows("SELECT pg_advisory_unlock(hashtext(current_schema()), ?::int4)", (int(Lock.ROUNDS),)) == [
            (True,)
        ]
        assert other.hold(Lock.ROUNDS)
    finally:
        other.close()


def test_the_lock_belongs_to_its_schema(postgres_server: LocalPostgres) -> None:
    """Two deployments in one database, each in its own schema, each hold their own rounds."""
    first, second = (PostgresDatabase(postgres_server.fresh_url()) for _ in range(2))
    try:
        assert first.hold(Lock.ROUNDS)
        assert second.hold(Lock.ROUNDS)
    finally:
        first.close()
        second.close()


def test_placeholders_outside_literals_are_spelled_for_psycopg() -> None:
    assert spelled("SELECT ? WHERE a LIKE '5%?' AND \"b?\" = ?") == b"SELECT %s WHERE a LIKE '5%%?' AND \"b?\" = %s"
    assert spelled("SELECT 'it''s ?', ?") == b"SELECT 'it''s ?', %s"
