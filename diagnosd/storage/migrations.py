"""Versioned migrations: an ordered list of (version, statements), each applied in one transaction
that also records its version, so a database is always at exactly one version of the schema. A
database newer than the code is refused, naming both versions: older code cannot know what a newer
schema means.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from diagnosd.errors import StoreError
from diagnosd.storage.database import Database


@dataclass(frozen=True)
class Migration:
    version: int
    statements: tuple[str, ...]


def migrate(db: Database, migrations: Sequence[Migration]) -> int:
    """Apply what `db` lacks of `migrations` (ascending versions from 1); returns the version reached."""
    latest = migrations[-1].version if migrations else 0
    found = db.schema_version()
    if found > latest:
        raise StoreError(db.path, f"schema version {found} is newer than this diagnosd ({latest})")
    for migration in migrations:
        if migration.version > found:
            _apply(db, migration)
    return latest


def _apply(db: Database, migration: Migration) -> None:
    try:
        with db.transaction():
            # Read again under the lock: another process (a replica starting too) may have migrated since.
            db.lock_schema()
            if db.schema_version() >= migration.version:
                return
            for statement in migration.statements:
                db.execute(statement)
            db.set_schema_version(migration.version)
    except StoreError as error:
        raise StoreError(db.path, f"migration to schema version {migration.version} failed: {error.reason}") from error
