"""The delivery memory: every distinct alert state Alertmanager sent (fingerprint, status, startsAt),
its request and what became of it, on the database (diagnosd.storage), so that a restart neither
loses a queued alert nor diagnoses a done one again, and a re-send is recognised as one.

Replicas on one database share it as their alert queue. A replica works only the states it claimed:
by the insert that made the row (ON CONFLICT DO NOTHING RETURNING: the other replica's insert makes
nothing), or by a conditional UPDATE of a failed state or of a queued one whose lease lapsed (its
replica died). The owner renews its leases while it works, and its mark counts only while the state
is still its own: a replica that lost its lease cannot overwrite what another concluded.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from diagnosd.errors import StoreError
from diagnosd.storage import Database, SQLiteDatabase
from diagnosd.storage.columns import moment, optional_moment, seconds
from diagnosd.storage.database import Row

Key = tuple[str, str, str]
_COLUMNS = (
    "fingerprint, status, starts_at, outcome, attempts, request, received_at, updated_at, error, owner, lease_until"
)
_SELECT = f"SELECT {_COLUMNS} FROM alerts"
_KEY = "fingerprint = ? AND status = ? AND starts_at = ?"
# Rows one statement names (an insert's states, a lookup's or mark's keys): 100 rows of at most 9
# variables stay far under what one statement takes (SQLite 3.35+: 32 766, PostgreSQL: 65 535).
_CHUNK = 100
# The first SQLite whose INSERT and UPDATE can say which rows they made (RETURNING): claims need it.
SQLITE_RETURNING = (3, 35, 0)
# What the inbox's outcome names mean here: a queued state is still owed a diagnosis, never purged;
# done and failed are the ends of one attempt.
QUEUED = "queued"
ATTEMPTED = ("done", "failed")
# After these nothing more happens to a state: no claim takes it again (a new state or a failed
# one is all a claim takes).
FOR_GOOD = frozenset({"done", "rejected", "superseded"})


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
    owner: str | None = None  # the replica that claimed it last
    lease_until: datetime | None = None  # while it holds it (None: nobody does)


@dataclass(frozen=True)
class Lease:
    """Who claims, and until when it holds what it claims."""

    owner: str
    now: datetime
    until: datetime


class DeliveryMemory:
    def __init__(self, database: Database) -> None:
        if isinstance(database, SQLiteDatabase) and sqlite3.sqlite_version_info < SQLITE_RETURNING:
            wanted = ".".join(map(str, SQLITE_RETURNING))
            raise StoreError(database.path, f"SQLite {sqlite3.sqlite_version} cannot claim alerts: {wanted}+ needed")
        self.database = database

    def alert(self, key: Key) -> AlertRecord | None:
        return self.alerts([key]).get(key)

    def alerts(self, keys: Iterable[Key]) -> dict[Key, AlertRecord]:
        """`alert` for many states, one query a chunk: the states known, by key (an unknown one is absent)."""
        found: dict[Key, AlertRecord] = {}
        for chunk in _chunks(keys):
            rows = self.database.rows(f"{_SELECT} WHERE {_keys_in(len(chunk))}", _flat(chunk))
            found.update((record.key, record) for record in map(_record, rows))
        return found

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

    def mark(self, key: Key, outcome: str, now: datetime, error: str | None = None, owner: str | None = None) -> bool:
        """Record what became of a state; with `owner`, only while that replica still holds it
        (queued, its own). Returns whether it was recorded."""
        with self.database.transaction():
            return self.mark_within(key, outcome, now, error, owner)

    def mark_within(
        self, key: Key, outcome: str, now: datetime, error: str | None = None, owner: str | None = None
    ) -> bool:
        """`mark` inside a transaction the caller holds (the tracker's: the findings and the mark
        commit together or not at all)."""
        return key in self.mark_all_within([key], outcome, now, error, owner)

    def mark_all(
        self, keys: Iterable[Key], outcome: str, now: datetime, error: str | None = None, owner: str | None = None
    ) -> set[Key]:
        """`mark` for many states, in one transaction; returns the keys recorded."""
        with self.database.transaction():
            return self.mark_all_within(keys, outcome, now, error, owner)

    def mark_all_within(
        self, keys: Iterable[Key], outcome: str, now: datetime, error: str | None = None, owner: str | None = None
    ) -> set[Key]:
        """`mark_within` for many states, one UPDATE a chunk; each state is marked once however
        often `keys` names it."""
        attempt = 1 if outcome in ATTEMPTED else 0
        recorded: set[Key] = set()
        for chunk in _chunks(keys):
            sql = (
                "UPDATE alerts SET outcome = ?, updated_at = ?, error = ?, attempts = attempts + ?, lease_until = NULL "
                f"WHERE {_keys_in(len(chunk))}"
            )
            args: list[object] = [outcome, seconds(now), error, attempt, *_flat(chunk)]
            if owner is not None:
                sql += " AND owner = ? AND outcome = ?"
                args += [owner, QUEUED]
            made = self.database.rows(f"{sql} RETURNING fingerprint, status, starts_at", args)
            recorded.update((fp, status, starts) for fp, status, starts in made)
        return recorded

    def supersede(self, key: Key, now: datetime, outcome: str, waiting: Iterable[str]) -> bool:
        """A newer state replaced this one: `outcome` if it was still waiting (one of `waiting`),
        whoever holds it; that replica's mark then finds it no longer its own."""
        marks = list(waiting)
        with self.database.transaction():
            changed = self.database.execute(
                f"UPDATE alerts SET outcome = ?, updated_at = ?, lease_until = NULL WHERE {_KEY} "
                f"AND outcome IN ({', '.join('?' * len(marks))})",
                (outcome, seconds(now), *key, *marks),
            )
        return changed > 0

    def claim_new(self, states: Sequence[tuple[Key, dict[str, Any]]], lease: Lease) -> set[Key]:
        """Insert the states not known yet, queued and held by `lease.owner`; returns the keys this
        insert made (a state another replica inserted first is not among them)."""
        claimed: set[Key] = set()
        db = self.database
        with db.transaction():
            for start in range(0, len(states), _CHUNK):
                chunk = states[start : start + _CHUNK]
                rows = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * len(chunk))
                args = [
                    value
                    for key, request in chunk
                    for value in (*key, QUEUED, json.dumps(request), *_times(lease), lease.owner)
                ]
                made = db.rows(
                    "INSERT INTO alerts (fingerprint, status, starts_at, outcome, request, received_at, updated_at, "
                    f"lease_until, owner) VALUES {rows} ON CONFLICT (fingerprint, status, starts_at) DO NOTHING "
                    "RETURNING fingerprint, status, starts_at",
                    args,
                )
                claimed.update((fp, status, starts) for fp, status, starts in made)
        return claimed

    def claim(self, record: AlertRecord, lease: Lease) -> bool:
        """Queue a known state again for `lease.owner`, if it is still as `record` saw it (same
        outcome and attempts) and nobody holds it: of two replicas asking, one gets it."""
        with self.database.transaction():
            changed = self.database.execute(
                "UPDATE alerts SET outcome = ?, updated_at = ?, lease_until = ?, owner = ? "
                f"WHERE {_KEY} AND outcome = ? AND attempts = ? AND (lease_until IS NULL OR lease_until < ?)",
                (
                    QUEUED,
                    *_times(lease)[1:],
                    lease.owner,
                    *record.key,
                    record.outcome,
                    record.attempts,
                    seconds(lease.now),
                ),
            )
        return changed > 0

    def claim_lapsed(self, lease: Lease) -> list[AlertRecord]:
        """Take the queued states nobody holds any more (their replica died, or they predate
        leases) and those `lease.owner` held already (its own, from before a restart); the
        earliest received first."""
        now = seconds(lease.now)
        with self.database.transaction():
            rows = self.database.rows(
                "UPDATE alerts SET lease_until = ?, owner = ? WHERE outcome = ? "
                f"AND (owner = ? OR lease_until IS NULL OR lease_until < ?) RETURNING {_COLUMNS}",
                (seconds(lease.until), lease.owner, QUEUED, lease.owner, now),
            )
        return sorted((_record(row) for row in rows), key=lambda r: r.received_at)

    def release(self, owner: str) -> int:
        """Let go of what `owner` holds (it stops): another replica may take it at once."""
        with self.database.transaction():
            return self.database.execute(
                "UPDATE alerts SET lease_until = NULL WHERE owner = ? AND outcome = ?", (owner, QUEUED)
            )

    def renew(self, lease: Lease) -> int:
        """Hold every queued state `lease.owner` holds until `lease.until`; returns how many."""
        with self.database.transaction():
            return self.database.execute(
                "UPDATE alerts SET lease_until = ? WHERE owner = ? AND outcome = ?",
                (seconds(lease.until), lease.owner, QUEUED),
            )

    def touch(self, keys: Iterable[Key], now: datetime) -> set[Key]:
        """Seen again (a re-send): keep remembering it for another retention period. Returns the
        keys still remembered (another replica's retention may have forgotten one meanwhile)."""
        touched: set[Key] = set()
        with self.database.transaction():
            for chunk in _chunks(keys):
                made = self.database.rows(
                    f"UPDATE alerts SET updated_at = ? WHERE {_keys_in(len(chunk))} "
                    "RETURNING fingerprint, status, starts_at",
                    [seconds(now), *_flat(chunk)],
                )
                touched.update((fp, status, starts) for fp, status, starts in made)
        return touched

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


class BatchClaim:
    """The claims a batch's diagnoses are written under (Tracker.record_many), one per state: the
    first one asked marks every state of the batch `outcome`, inside the transaction the findings
    are written in (one UPDATE a chunk, committed or not with every finding); each then says
    whether its own state was still `owner`'s."""

    def __init__(self, memory: DeliveryMemory, keys: Sequence[Key], outcome: str, now: datetime, owner: str) -> None:
        self._memory, self._keys, self._outcome, self._now, self._owner = memory, keys, outcome, now, owner
        self._held: set[Key] | None = None

    def of(self, key: Key) -> Callable[[], bool]:
        def mine() -> bool:
            if self._held is None:
                self._held = self._memory.mark_all_within(self._keys, self._outcome, self._now, None, self._owner)
            return key in self._held

        return mine

    def holds(self, key: Key) -> bool:
        """Whether the state was recorded (False before any claim was asked, or if none was)."""
        return self._held is not None and key in self._held


def _keys_in(count: int) -> str:
    """The condition that a row is one of `count` keys (their values `_flat`). Spelled as ORs of
    the key: SQLite answers `(...) IN (VALUES ...)` by scanning the table, ORs by its index."""
    return f"({' OR '.join([f'({_KEY})'] * count)})"


def _chunks(keys: Iterable[Key]) -> Iterator[list[Key]]:
    """The distinct keys, `_CHUNK` at a time (a statement's variables are bounded)."""
    distinct = list(dict.fromkeys(keys))
    for start in range(0, len(distinct), _CHUNK):
        yield distinct[start : start + _CHUNK]


def _flat(keys: Sequence[Key]) -> list[str]:
    return [value for key in keys for value in key]


def _times(lease: Lease) -> tuple[float, float, float]:
    """received_at, updated_at, lease_until of a state claimed now."""
    return seconds(lease.now), seconds(lease.now), seconds(lease.until)


def _record(row: Row) -> AlertRecord:
    fp, status, starts_at, outcome, attempts, request, received, updated, error, owner, until = row
    return AlertRecord(
        (fp, status, starts_at),
        outcome,
        attempts,
        json.loads(request),
        moment(received),
        moment(updated),
        error,
        owner,
        optional_moment(until),
    )
