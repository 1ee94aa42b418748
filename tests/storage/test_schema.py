"""One schema, two spellings: SQLite's and PostgreSQL's migrations have the same versions and give
the same tables, columns (nullability, defaults, primary keys) and indexes, read back from each
database's own catalog."""

from __future__ import annotations

from pathlib import Path

from diagnosd.storage import SQLiteDatabase
from diagnosd.storage.postgres import PostgresDatabase
from diagnosd.storage.schema import POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS

# Where the spellings differ on purpose: SQLite has no boolean; `present` is what the store writes.
TYPES = {"REAL": "number", "double precision": "number", "TEXT": "text", "text": "text", "INTEGER": "integer"}
TYPES |= {"integer": "integer", "boolean": "integer"}
# Only PostgreSQL keeps the schema version in a table (SQLite: in its header, PRAGMA user_version).
VERSION_TABLE = "diagnosd_schema"

Column = tuple[str, bool, str | None, int]  # type family, NOT NULL, default, position in the primary key
Schema = tuple[dict[str, dict[str, Column]], set[tuple[str, str]]]


def sqlite_schema(db: SQLiteDatabase) -> Schema:
    tables = [name for (name,) in db.rows("SELECT name FROM sqlite_master WHERE type = 'table'")]
    columns = {
        table: {
            name: (TYPES[kind], bool(notnull), default, pk)
            for _, name, kind, notnull, default, pk in db.rows(f"PRAGMA table_info({table})")
        }
        for table in tables
    }
    indexes = db.rows("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
    return columns, {(name, table) for name, table in indexes}


def postgres_schema(db: PostgresDatabase) -> Schema:
    rows = db.rows(
        "SELECT c.table_name, c.column_name, c.data_type, c.is_nullable = 'NO', c.column_default, "
        "COALESCE(k.ordinal_position, 0) FROM information_schema.columns c "
        "LEFT JOIN information_schema.table_constraints t ON t.table_schema = c.table_schema "
        "AND t.table_name = c.table_name AND t.constraint_type = 'PRIMARY KEY' "
        "LEFT JOIN information_schema.key_column_usage k ON k.constraint_name = t.constraint_name "
        "AND k.table_schema = c.table_schema AND k.column_name = c.column_name "
        "WHERE c.table_schema = current_schema() AND c.table_name != ?",
        (VERSION_TABLE,),
    )
    columns: dict[str, dict[str, Column]] = {}
    for table, name, kind, notnull, default, pk in rows:
        columns.setdefault(table, {})[name] = (TYPES[kind], notnull, default, pk)
    indexes = db.rows(
        "SELECT indexname, tablename FROM pg_indexes WHERE schemaname = current_schema() "
        "AND indexname NOT LIKE '%\\_pkey'"
    )
    return columns, {(name, table) for name, table in indexes}


def test_both_lists_have_the_same_versions_counting_up_from_one() -> None:
    versions = [m.version for m in SQLITE_MIGRATIONS]
    assert versions == list(range(1, len(SQLITE_MIGRATIONS) + 1))
    assert [m.version for m in POSTGRES_MIGRATIONS] == versions


def test_both_give_the_same_tables_columns_and_indexes(tmp_path: Path, postgres_url: str) -> None:
    sqlite = SQLiteDatabase.open(tmp_path / "diagnosd.db")
    postgres = PostgresDatabase.open(postgres_url)
    try:
        on_sqlite, on_postgres = sqlite_schema(sqlite), postgres_schema(postgres)
    finally:
        sqlite.close()
        postgres.close()
    assert set(on_sqlite[0]) == {"findings", "targets", "alerts", "turns"}
    assert on_postgres == on_sqlite
