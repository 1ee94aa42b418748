"""Statements built from names, in the SQL that SQLite (3.24+) and PostgreSQL share."""

from __future__ import annotations

from collections.abc import Sequence


def upsert(table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    """Insert a row of `columns`, or update every column outside `key` of the row already there."""
    names = ", ".join(quote(c) for c in columns)
    marks = ", ".join("?" * len(columns))
    updates = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in columns if c not in key)
    conflict = ", ".join(quote(c) for c in key)
    return f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT ({conflict}) DO UPDATE SET {updates}"


def quote(name: str) -> str:
    """A column name as an identifier, whatever it is (`values` is a keyword)."""
    return '"' + name.replace('"', '""') + '"'
