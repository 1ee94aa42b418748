"""The findings store: SQLite (stdlib sqlite3, WAL), holding findings with their evidence, target
states and the memory of Alertmanager deliveries, so that a restart loses neither.

Used from the event loop's thread only: statements are small and indexed (WAL with
synchronous=NORMAL commits without fsync), and retention deletes in short chunks.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from diagnosd.errors import StoreError
from diagnosd.findings.codec import finding_from_row, finding_row
from diagnosd.findings.fingerprint import labels_key
from diagnosd.findings.lifecycle import Finding, State, Trigger
from diagnosd.findings.target import TargetState

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE findings (
    fingerprint TEXT NOT NULL, active_at REAL NOT NULL,
    symptom TEXT NOT NULL, cause TEXT NOT NULL, severity TEXT NOT NULL, labels TEXT NOT NULL,
    state TEXT NOT NULL, fired_at REAL, resolved_at REAL, resolved_by TEXT,
    last_seen REAL NOT NULL, evaluated_at REAL NOT NULL, trigger TEXT NOT NULL,
    alerts TEXT NOT NULL, root_cause TEXT NOT NULL,
    PRIMARY KEY (fingerprint, active_at)
);
CREATE INDEX findings_state ON findings (state, resolved_at);
CREATE INDEX findings_symptom ON findings (symptom, cause);
CREATE TABLE targets (
    symptom TEXT NOT NULL, labels TEXT NOT NULL, present INTEGER, "values" TEXT NOT NULL,
    evaluated_at REAL NOT NULL, trigger TEXT NOT NULL,
    PRIMARY KEY (symptom, labels)
);
CREATE TABLE alerts (
    fingerprint TEXT NOT NULL, status TEXT NOT NULL, starts_at TEXT NOT NULL,
    outcome TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, request TEXT NOT NULL,
    received_at REAL NOT NULL, updated_at REAL NOT NULL, error TEXT,
    PRIMARY KEY (fingerprint, status, starts_at)
);
CREATE INDEX alerts_outcome ON alerts (outcome, updated_at);
"""
COLUMNS = (
    "fingerprint, active_at, symptom, cause, severity, labels, state, fired_at, resolved_at, resolved_by, "
    "last_seen, evaluated_at, trigger, alerts, root_cause"
)
ACTIVE = (State.PENDING, State.FIRING)


@dataclass(frozen=True)
class FindingQuery:
    states: Sequence[State] = (State.PENDING, State.FIRING, State.RESOLVED)
    symptom: str | None = None
    cause: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    # Findings active at some moment in [since, until].
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100


@dataclass(frozen=True)
class AlertRecord:
    """One distinct alert state (fingerprint, status, startsAt) and what became of it."""

    key: tuple[str, str, str]
    outcome: str
    attempts: int
    request: dict[str, Any]
    received_at: datetime
    updated_at: datetime
    error: str | None


class Store:
    def __init__(self, connection: sqlite3.Connection, path: str) -> None:
        self._db = connection
        self.path = path

    @classmethod
    def open(cls, path: Path | str) -> Store:
        """Open (creating, migrating) the store; raises StoreError saying why it cannot."""
        where = str(path)
        try:
            if where != ":memory:":
                Path(where).parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(where, isolation_level=None, timeout=5.0)
        except (OSError, sqlite3.Error) as error:
            raise StoreError(where, f"cannot open: {error}") from error
        store = cls(db, where)
        try:
            store._prepare()
        except sqlite3.Error as error:
            db.close()
            raise StoreError(where, f"not a usable diagnosd store: {error}") from error
        except StoreError:
            db.close()
            raise
        return store

    def _prepare(self) -> None:
        mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if self.path != ":memory:" and str(mode).lower() != "wal":
            raise StoreError(self.path, f"cannot use write-ahead logging (journal_mode={mode})")
        self._db.execute("PRAGMA synchronous=NORMAL")
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(self.path, f"schema version {version} is newer than this diagnosd ({SCHEMA_VERSION})")
        if version == 0:
            # executescript commits any open transaction first: the script carries its own.
            self._db.executescript(f"BEGIN IMMEDIATE;\n{SCHEMA}\nPRAGMA user_version={SCHEMA_VERSION};\nCOMMIT;")

    def close(self) -> None:
        self._db.close()

    def journal_mode(self) -> str:
        return str(self._db.execute("PRAGMA journal_mode").fetchone()[0])

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db, self.path)

    # findings

    def save(self, changed: Iterable[Finding], forgotten: Iterable[tuple[str, datetime]] = ()) -> None:
        """Upsert episodes and delete forgotten ones (pending that cleared), in one transaction."""
        with self._transaction():
            self._db.executemany(
                f"INSERT OR REPLACE INTO findings ({COLUMNS}) VALUES ({', '.join('?' * 15)})",
                [finding_row(f) for f in changed],
            )
            self._db.executemany(
                "DELETE FROM findings WHERE fingerprint = ? AND active_at = ?",
                [(fp, _ts(at)) for fp, at in forgotten],
            )

    def active(self) -> list[Finding]:
        rows = self._db.execute(f"SELECT {COLUMNS} FROM findings WHERE state IN (?, ?)", ACTIVE).fetchall()
        return [finding_from_row(row) for row in rows]

    def findings(self, query: FindingQuery) -> list[Finding]:
        where = ["state IN (" + ", ".join("?" * len(query.states)) + ")"]
        args: list[object] = [str(s) for s in query.states]
        for column, value in (("symptom", query.symptom), ("cause", query.cause)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        for name, value in sorted(query.labels.items()):
            where.append("json_extract(labels, ?) = ?")
            args += [f'$."{name}"', value]
        if query.since is not None:
            where.append("(resolved_at IS NULL OR resolved_at >= ?)")
            args.append(_ts(query.since))
        if query.until is not None:
            where.append("active_at <= ?")
            args.append(_ts(query.until))
        sql = (
            f"SELECT {COLUMNS} FROM findings WHERE {' AND '.join(where)} "
            "ORDER BY state = 'resolved', last_seen DESC, fingerprint LIMIT ?"
        )
        return [finding_from_row(row) for row in self._db.execute(sql, [*args, query.limit]).fetchall()]

    def episodes(self, fingerprint: str) -> list[Finding]:
        """Every stored episode of one finding, the latest first."""
        sql = f"SELECT {COLUMNS} FROM findings WHERE fingerprint = ? ORDER BY active_at DESC"
        return [finding_from_row(row) for row in self._db.execute(sql, (fingerprint,)).fetchall()]

    # target states

    def save_states(self, states: Iterable[TargetState], removed: Iterable[tuple[str, str]] = ()) -> None:
        with self._transaction():
            self._db.executemany(
                'INSERT OR REPLACE INTO targets (symptom, labels, present, "values", evaluated_at, trigger) '
                "VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        s.symptom,
                        labels_key(s.labels),
                        s.present,
                        json.dumps(dict(s.values)),
                        _ts(s.evaluated_at),
                        s.trigger,
                    )
                    for s in states
                ],
            )
            self._db.executemany("DELETE FROM targets WHERE symptom = ? AND labels = ?", list(removed))

    def states(self) -> list[TargetState]:
        rows = self._db.execute('SELECT symptom, labels, present, "values", evaluated_at, trigger FROM targets')
        return [
            TargetState(s, json.loads(labels), None if p is None else bool(p), json.loads(v), _dt(at), Trigger(t))
            for s, labels, p, v, at, t in rows.fetchall()
        ]

    # alert memory

    def alert(self, key: tuple[str, str, str]) -> AlertRecord | None:
        row = self._db.execute(
            "SELECT fingerprint, status, starts_at, outcome, attempts, request, received_at, updated_at, error "
            "FROM alerts WHERE fingerprint = ? AND status = ? AND starts_at = ?",
            key,
        ).fetchone()
        return _alert(row) if row else None

    def remember(self, key: tuple[str, str, str], request: dict[str, Any], outcome: str, now: datetime) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT INTO alerts (fingerprint, status, starts_at, outcome, request, received_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (fingerprint, status, starts_at) "
                "DO UPDATE SET outcome = excluded.outcome, updated_at = excluded.updated_at",
                (*key, outcome, json.dumps(request), _ts(now), _ts(now)),
            )

    def mark(self, key: tuple[str, str, str], outcome: str, now: datetime, error: str | None = None) -> None:
        attempt = 1 if outcome in ("done", "failed") else 0
        with self._transaction():
            self._db.execute(
                "UPDATE alerts SET outcome = ?, updated_at = ?, error = ?, attempts = attempts + ? "
                "WHERE fingerprint = ? AND status = ? AND starts_at = ?",
                (outcome, _ts(now), error, attempt, *key),
            )

    def touch(self, keys: Iterable[tuple[str, str, str]], now: datetime) -> None:
        """Seen again (a re-send): keep remembering it for another retention period."""
        with self._transaction():
            self._db.executemany(
                "UPDATE alerts SET updated_at = ? WHERE fingerprint = ? AND status = ? AND starts_at = ?",
                [(_ts(now), *key) for key in keys],
            )

    def alerts_by_outcome(self, outcome: str) -> list[AlertRecord]:
        rows = self._db.execute(
            "SELECT fingerprint, status, starts_at, outcome, attempts, request, received_at, updated_at, error "
            "FROM alerts WHERE outcome = ? ORDER BY received_at",
            (outcome,),
        ).fetchall()
        return [_alert(row) for row in rows]

    # retention

    def purge(self, before: datetime, chunk: int = 1000) -> int:
        """Delete one chunk of what is older than `before` in each table; returns rows deleted."""
        cut = _ts(before)
        statements = (
            "DELETE FROM findings WHERE rowid IN (SELECT rowid FROM findings "
            "WHERE state = 'resolved' AND resolved_at < ? LIMIT ?)",
            "DELETE FROM alerts WHERE rowid IN (SELECT rowid FROM alerts "
            "WHERE outcome != 'queued' AND updated_at < ? LIMIT ?)",
            "DELETE FROM targets WHERE rowid IN (SELECT rowid FROM targets WHERE evaluated_at < ? LIMIT ?)",
        )
        deleted = 0
        with self._transaction():
            for sql in statements:
                deleted += self._db.execute(sql, (cut, chunk)).rowcount
        return deleted


class _Transaction:
    def __init__(self, db: sqlite3.Connection, path: str) -> None:
        self._db = db
        self._path = path

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        try:
            self._db.execute("COMMIT" if kind is None else "ROLLBACK")
        except sqlite3.Error as failure:
            raise StoreError(self._path, f"write failed: {failure}") from failure
        if isinstance(error, sqlite3.Error):
            raise StoreError(self._path, f"write failed: {error}") from error


def _ts(moment: datetime) -> float:
    return moment.timestamp()


def _dt(value: float | None) -> datetime:
    assert value is not None
    return datetime.fromtimestamp(value, UTC)


def _alert(row: tuple[Any, ...]) -> AlertRecord:
    fp, status, starts_at, outcome, attempts, request, received, updated, error = row
    return AlertRecord(
        (fp, status, starts_at), outcome, attempts, json.loads(request), _dt(received), _dt(updated), error
    )
