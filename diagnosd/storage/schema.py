"""The schema's history, one migration per version, as SQLite spells it and as PostgreSQL does, side
by side: every version in both lists, giving the same tables and columns (tests/storage checks).
Never edit a released migration, add the next to both.

Moments are Unix seconds (REAL, DOUBLE PRECISION); labels, evidence and requests are JSON text.
"""

from __future__ import annotations

from diagnosd.storage.migrations import Migration

SQLITE_MIGRATIONS = (
    # The first schema, as `PRAGMA user_version` 1 stores were created.
    Migration(
        1,
        (
            """CREATE TABLE findings (
                fingerprint TEXT NOT NULL, active_at REAL NOT NULL,
                symptom TEXT NOT NULL, cause TEXT NOT NULL, severity TEXT NOT NULL, labels TEXT NOT NULL,
                state TEXT NOT NULL, fired_at REAL, resolved_at REAL, resolved_by TEXT,
                last_seen REAL NOT NULL, evaluated_at REAL NOT NULL, trigger TEXT NOT NULL,
                alerts TEXT NOT NULL, root_cause TEXT NOT NULL,
                PRIMARY KEY (fingerprint, active_at)
            )""",
            "CREATE INDEX findings_state ON findings (state, resolved_at)",
            "CREATE INDEX findings_symptom ON findings (symptom, cause)",
            """CREATE TABLE targets (
                symptom TEXT NOT NULL, labels TEXT NOT NULL, present INTEGER, "values" TEXT NOT NULL,
                evaluated_at REAL NOT NULL, trigger TEXT NOT NULL,
                PRIMARY KEY (symptom, labels)
            )""",
            """CREATE TABLE alerts (
                fingerprint TEXT NOT NULL, status TEXT NOT NULL, starts_at TEXT NOT NULL,
                outcome TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, request TEXT NOT NULL,
                received_at REAL NOT NULL, updated_at REAL NOT NULL, error TEXT,
                PRIMARY KEY (fingerprint, status, starts_at)
            )""",
            "CREATE INDEX alerts_outcome ON alerts (outcome, updated_at)",
        ),
    ),
    # Each finding row names the format its values are encoded in (diagnosd.findings.stored);
    # the rows written before are format 1.
    Migration(2, ("ALTER TABLE findings ADD COLUMN format INTEGER NOT NULL DEFAULT 1",)),
    # Replicas sharing the alert queue: the replica working an alert state (`owner`) and until when
    # it holds it (`lease_until`, renewed while it works); a lapsed lease is taken by another. One
    # row of `turns` per write that replicas take turns at (the tracker's, 'findings'): updating it
    # holds the turn to the end of the transaction, on every backend, with the SQL they share.
    Migration(
        3,
        (
            "ALTER TABLE alerts ADD COLUMN owner TEXT",
            "ALTER TABLE alerts ADD COLUMN lease_until REAL",
            "CREATE TABLE turns (name TEXT NOT NULL PRIMARY KEY, taken INTEGER NOT NULL DEFAULT 0)",
            "INSERT INTO turns (name) VALUES ('findings')",
        ),
    ),
)

POSTGRES_MIGRATIONS = (
    # Version 1 as SQLite's, spelled for PostgreSQL: REAL holds 4 bytes there, DOUBLE PRECISION
    # keeps the seconds SQLite's REAL (8 bytes) does; `present` is what the store writes, a boolean.
    Migration(
        1,
        (
            """CREATE TABLE findings (
                fingerprint TEXT NOT NULL, active_at DOUBLE PRECISION NOT NULL,
                symptom TEXT NOT NULL, cause TEXT NOT NULL, severity TEXT NOT NULL, labels TEXT NOT NULL,
                state TEXT NOT NULL, fired_at DOUBLE PRECISION, resolved_at DOUBLE PRECISION, resolved_by TEXT,
                last_seen DOUBLE PRECISION NOT NULL, evaluated_at DOUBLE PRECISION NOT NULL, trigger TEXT NOT NULL,
                alerts TEXT NOT NULL, root_cause TEXT NOT NULL,
                PRIMARY KEY (fingerprint, active_at)
            )""",
            "CREATE INDEX findings_state ON findings (state, resolved_at)",
            "CREATE INDEX findings_symptom ON findings (symptom, cause)",
            """CREATE TABLE targets (
                symptom TEXT NOT NULL, labels TEXT NOT NULL, present BOOLEAN, "values" TEXT NOT NULL,
                evaluated_at DOUBLE PRECISION NOT NULL, trigger TEXT NOT NULL,
                PRIMARY KEY (symptom, labels)
            )""",
            """CREATE TABLE alerts (
                fingerprint TEXT NOT NULL, status TEXT NOT NULL, starts_at TEXT NOT NULL,
                outcome TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, request TEXT NOT NULL,
                received_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, error TEXT,
                PRIMARY KEY (fingerprint, status, starts_at)
            )""",
            "CREATE INDEX alerts_outcome ON alerts (outcome, updated_at)",
        ),
    ),
    Migration(2, ("ALTER TABLE findings ADD COLUMN format INTEGER NOT NULL DEFAULT 1",)),
    Migration(
        3,
        (
            "ALTER TABLE alerts ADD COLUMN owner TEXT",
            "ALTER TABLE alerts ADD COLUMN lease_until DOUBLE PRECISION",
            "CREATE TABLE turns (name TEXT NOT NULL PRIMARY KEY, taken INTEGER NOT NULL DEFAULT 0)",
            "INSERT INTO turns (name) VALUES ('findings')",
        ),
    ),
)
