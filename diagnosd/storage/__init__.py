"""Where diagnosd keeps its state: one database (SQLite today), its schema as versioned migrations.

The findings store and the delivery memory are built on the same Database; `open_database` is
the one place that picks a backend from the settings' location.
"""

from pathlib import Path

from diagnosd.storage.database import Database
from diagnosd.storage.migrations import Migration
from diagnosd.storage.sqlite import SQLiteDatabase


def open_database(path: Path | str) -> Database:
    """Open (creating, migrating) the database at `path`; raises StoreError saying why it cannot."""
    return SQLiteDatabase.open(path)


__all__ = ["Database", "Migration", "SQLiteDatabase", "open_database"]
