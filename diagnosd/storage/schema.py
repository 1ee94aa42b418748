"""The schema's history as SQLite spells it, one migration per version; never edit a released one,
add the next. A PostgreSQL backend would keep its own list of the same versions beside this one.

Moments are Unix seconds (REAL); labels, evidence and requests are JSON text.
"""

from __future__ import annotations

from diagnosd.storage.migrations import Migration

MIGRATIONS = (
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
)
