"""The findings store: every episode of every finding with its evidence, and the latest target
states, on the database (diagnosd.storage), so that a restart loses neither.

Retention deletes in short chunks, so a purge never holds the write lock for long. The tracker's
read-modify-write runs in `writing()`: one transaction holding the findings turn, so replicas on one
database never write findings from views the other has already changed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from diagnosd.errors import StoreError
from diagnosd.findings.fingerprint import labels_key
from diagnosd.findings.lifecycle import Finding, State, Trigger
from diagnosd.findings.stored import COLUMNS, finding_from_row, finding_row
from diagnosd.findings.target import TargetState
from diagnosd.storage import Database, open_database
from diagnosd.storage.columns import moment, seconds
from diagnosd.storage.database import Row
from diagnosd.storage.sql import quote, upsert

ACTIVE = (State.PENDING, State.FIRING)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM findings"
_UPSERT = upsert("findings", COLUMNS, key=("fingerprint", "active_at"))
_TARGET = ("symptom", "labels", "present", "values", "evaluated_at", "trigger")
_TARGET_UPSERT = upsert("targets", _TARGET, key=("symptom", "labels"))
_FINDINGS_TURN = "findings"  # its row in `turns` (schema version 3)


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


class Store:
    def __init__(self, database: Database) -> None:
        self.database = database

    @classmethod
    def open(cls, path: Path | str) -> Store:
        """A store on a database of its own (opened, created, migrated); raises StoreError."""
        return cls(open_database(path))

    def close(self) -> None:
        """Close the database (the daemon closes the one it shares once, through the database)."""
        self.database.close()

    # findings

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """One transaction holding the findings turn: a replica that asks meanwhile waits for its
        end, then reads what it wrote (updating the turn's row locks it on PostgreSQL; SQLite's
        transaction holds the whole file already)."""
        with self.database.transaction():
            self.database.execute("UPDATE turns SET taken = taken + 1 WHERE name = ?", (_FINDINGS_TURN,))
            yield

    def save(self, changed: Iterable[Finding], forgotten: Iterable[tuple[str, datetime]] = ()) -> None:
        """Upsert episodes and delete forgotten ones (pending that cleared), in one transaction."""
        with self.database.transaction():
            self.write(changed, forgotten)

    def write(self, changed: Iterable[Finding], forgotten: Iterable[tuple[str, datetime]] = ()) -> None:
        """`save` inside a transaction the caller holds (`writing`)."""
        db = self.database
        db.executemany(_UPSERT, [finding_row(f) for f in changed])
        db.executemany(
            "DELETE FROM findings WHERE fingerprint = ? AND active_at = ?",
            [(fp, seconds(at)) for fp, at in forgotten],
        )

    def active(self, symptom: str | None = None) -> list[Finding]:
        """The pending and firing findings, of one symptom or all."""
        sql, args = f"{_SELECT} WHERE state IN (?, ?)", [str(s) for s in ACTIVE]
        if symptom is not None:
            sql, args = f"{sql} AND symptom = ?", [*args, symptom]
        return self._findings(sql, args)

    def findings(self, query: FindingQuery) -> list[Finding]:
        where = ["state IN (" + ", ".join("?" * len(query.states)) + ")"]
        args: list[object] = [str(s) for s in query.states]
        for column, value in (("symptom", query.symptom), ("cause", query.cause)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        for name, value in sorted(query.labels.items()):
            expression, key = self.database.json_text("labels", name)
            where.append(f"{expression} = ?")
            args += [key, value]
        if query.since is not None:
            where.append("(resolved_at IS NULL OR resolved_at >= ?)")
            args.append(seconds(query.since))
        if query.until is not None:
            where.append("active_at <= ?")
            args.append(seconds(query.until))
        sql = f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY state = 'resolved', last_seen DESC, fingerprint LIMIT ?"
        return self._findings(sql, [*args, query.limit])

    def episodes(self, fingerprint: str) -> list[Finding]:
        """Every stored episode of one finding, the latest first."""
        sql = f"{_SELECT} WHERE fingerprint = ? ORDER BY active_at DESC"
        return self._findings(sql, (fingerprint,))

    def _findings(self, sql: str, args: Sequence[object]) -> list[Finding]:
        return [self._decode(row) for row in self.database.rows(sql, args)]

    def _decode(self, row: Row) -> Finding:
        try:
            return finding_from_row(row)
        except (ValueError, KeyError) as error:
            raise StoreError(self.database.path, f"cannot read finding {row[0]}: {error}") from error

    # target states

    def save_states(self, states: Iterable[TargetState], removed: Iterable[tuple[str, str]] = ()) -> None:
        with self.database.transaction():
            self.write_states(states, removed)

    def write_states(self, states: Iterable[TargetState], removed: Iterable[tuple[str, str]] = ()) -> None:
        """`save_states` inside a transaction the caller holds (`writing`)."""
        db = self.database
        db.executemany(
            _TARGET_UPSERT,
            [
                (
                    s.symptom,
                    labels_key(s.labels),
                    s.present,
                    json.dumps(dict(s.values)),
                    seconds(s.evaluated_at),
                    s.trigger,
                )
                for s in states
            ],
        )
        db.executemany("DELETE FROM targets WHERE symptom = ? AND labels = ?", list(removed))

    def expire_states(self, before: datetime) -> int:
        """Delete the target states last evaluated before `before` (by the row's own time: another
        replica may have refreshed one this one remembers as old); returns how many."""
        with self.database.transaction():
            return self.database.execute("DELETE FROM targets WHERE evaluated_at < ?", (seconds(before),))

    def states(self) -> list[TargetState]:
        rows = self.database.rows(f"SELECT {', '.join(map(quote, _TARGET))} FROM targets")
        return [
            TargetState(s, json.loads(labels), None if p is None else bool(p), json.loads(v), moment(at), Trigger(t))
            for s, labels, p, v, at, t in rows
        ]

    # retention

    def purge(self, before: datetime, chunk: int = 1000) -> int:
        """Delete one chunk of resolved findings and of target states older than `before`; returns
        the rows deleted. Chunks are chosen by primary key, which every backend can do."""
        cut = seconds(before)
        statements = (
            "DELETE FROM findings WHERE (fingerprint, active_at) IN (SELECT fingerprint, active_at FROM findings "
            "WHERE state = 'resolved' AND resolved_at < ? LIMIT ?)",
            "DELETE FROM targets WHERE (symptom, labels) IN "
            "(SELECT symptom, labels FROM targets WHERE evaluated_at < ? LIMIT ?)",
        )
        db = self.database
        with db.transaction():
            return sum(db.execute(sql, (cut, chunk)) for sql in statements)
