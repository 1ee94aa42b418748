"""The delivery memory: every distinct alert state Alertmanager sent (fingerprint, status, startsAt),
its request and what became of it, on the database (diagnosd.storage), so that a restart neither
loses a queued alert nor diagnoses a done one again, and a re-send is recognised as one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from diagnosd.storage import Database
from diagnosd.storage.columns import moment, seconds
from diagnosd.storage.database import Row

Key = tuple[str, str, str]
_SELECT = (
    "SELECT fingerprint, status, starts_at, outcome, attempts, request, received_at, updated_at, error FROM alerts"
)
# What the inbox's outcome names mean here: a queued state is still owed a diagnosis, never purged;
# done and failed are the ends of one attempt.
QUEUED = "queued"
ATTEMPTED = ("done", "failed")


@dataclass(frozen=True)
class AlertRecord:
    """One distinct alert state (fingerprint, status, startsAt) and what became of it."""

    key: Key
    outcome: str
    attempts: int
    request: dict[str, Any]
    received_at: datetime
    updated_at: datetime
    error: str | None


class DeliveryMemory:
    def __init__(self, database: Database) -> None:
        self.database = database

    def alert(self, key: Key) -> AlertRecord | None:
        rows = self.database.rows(f"{_SELECT} WHERE fingerprint = ? AND status = ? AND starts_at = ?", key)
        return _record(rows[0]) if rows else None

    def remember(self, key: Key, request: dict[str, Any], outcome: str, now: datetime) -> None:
        """Remember a new alert state with its request; one already known keeps its request."""
        self.remember_all([(key, request)], outcome, now)

    def remember_all(self, states: Iterable[tuple[Key, dict[str, Any]]], outcome: str, now: datetime) -> None:
        """`remember` for many states, in one transaction."""
        db = self.database
        with db.transaction():
            db.executemany(
                "INSERT INTO alerts (fingerprint, status, starts_at, outcome, request, received_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (fingerprint, status, starts_at) "
                "DO UPDATE SET outcome = excluded.outcome, updated_at = excluded.updated_at",
                [(*key, outcome, json.dumps(request), seconds(now), seconds(now)) for key, request in states],
            )

    def mark(self, key: Key, outcome: str, now: datetime, error: str | None = None) -> None:
        attempt = 1 if outcome in ATTEMPTED else 0
        db = self.database
        with db.transaction():
            db.execute(
                "UPDATE alerts SET outcome = ?, updated_at = ?, error = ?, attempts = attempts + ? "
                "WHERE fingerprint = ? AND status = ? AND starts_at = ?",
                (outcome, seconds(now), error, attempt, *key),
            )

    def touch(self, keys: Iterable[Key], now: datetime) -> None:
        """Seen again (a re-send): keep remembering it for another retention period."""
        db = self.database
        with db.transaction():
            db.executemany(
                "UPDATE alerts SET updated_at = ? WHERE fingerprint = ? AND status = ? AND starts_at = ?",
                [(seconds(now), *key) for key in keys],
            )

    def alerts_by_outcome(self, outcome: str) -> list[AlertRecord]:
        """The alert states whose outcome is `outcome`, the earliest received first."""
        rows = self.database.rows(f"{_SELECT} WHERE outcome = ? ORDER BY received_at", (outcome,))
        return [_record(row) for row in rows]

    def purge(self, before: datetime, chunk: int = 1000) -> int:
        """Forget one chunk of what was last seen before `before`, never what is queued; returns the
        rows deleted."""
        db = self.database
        with db.transaction():
            return db.execute(
                "DELETE FROM alerts WHERE (fingerprint, status, starts_at) IN (SELECT fingerprint, status, starts_at "
                "FROM alerts WHERE outcome != ? AND updated_at < ? LIMIT ?)",
                (QUEUED, seconds(before), chunk),
            )


def _record(row: Row) -> AlertRecord:
    fp, status, starts_at, outcome, attempts, request, received, updated, error = row
    return AlertRecord(
        (fp, status, starts_at), outcome, attempts, json.loads(request), moment(received), moment(updated), error
    )
