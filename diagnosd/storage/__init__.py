"""Where diagnosd keeps its state: one database, SQLite embedded or PostgreSQL shared by replicas,
its schema as versioned migrations.

The findings store and the delivery memory are built on the same Database; `open_database` is
the one place that picks a backend from the settings' location.
"""

from pathlib import Path

from diagnosd.storage.database import Database
from diagnosd.storage.migrations import Migration
from diagnosd.storage.sqlite import SQLiteDatabase

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_url(where: object) -> bool:
    """Whether a store location is a PostgreSQL URL (anything else is a SQLite file)."""
    return isinstance(where, str) and where.startswith(POSTGRES_SCHEMES)


def open_database(where: Path | str) -> Database:
    """Open (creating, migrating) the database at `where`, a SQLite file or a postgresql:// URL;
    raises StoreError saying why it cannot."""
    if isinstance(where, str) and is_url(where):
        # Here, not above: importing psycopg costs every command line a tenth of its start, and
        # only a daemon on PostgreSQL needs it.
        from diagnosd.storage.postgres import PostgresDatabase

        return PostgresDatabase.open(where)
    return SQLiteDatabase.open(where)


__all__ = ["POSTGRES_SCHEMES", "Database", "Migration", "SQLiteDatabase", "is_url", "open_database"]
