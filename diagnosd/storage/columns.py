"""How values sit in columns on every backend: moments as Unix seconds (REAL), read back in UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def seconds(moment: datetime) -> float:
    return moment.timestamp()


def moment(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def optional_moment(value: float | None) -> datetime | None:
    return None if value is None else moment(value)
