"""A store written by the first schema (user_version 1, frozen in frozen_v1.py) opens, migrates and
loses nothing: its finding, target states and delivery memory read back as they were written."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from diagnosd.daemon.alertmanager.memory import DeliveryMemory
from diagnosd.findings.lifecycle import Phase, State, Trigger
from diagnosd.findings.store import FindingQuery, Store
from diagnosd.findings.target import TargetState
from diagnosd.storage import Database, open_database
from diagnosd.storage.schema import SQLITE_MIGRATIONS as MIGRATIONS
from tests.storage import frozen_v1
from tests.storage.frozen_v1 import without_nan


@pytest.fixture
def v1_file(tmp_path: Path) -> Path:
    path = tmp_path / "diagnosd.db"
    db = sqlite3.connect(path)
    try:
        db.executescript(f"BEGIN;\n{frozen_v1.SCHEMA}\nPRAGMA user_version=1;\nCOMMIT;")
        with db:
            db.execute(
                f"INSERT INTO findings ({frozen_v1.FINDING_COLUMNS}) VALUES ({', '.join('?' * 15)})",
                frozen_v1.FINDING_ROW,
            )
            db.executemany("INSERT INTO targets VALUES (?, ?, ?, ?, ?, ?)", frozen_v1.TARGET_ROWS)
            db.executemany("INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", frozen_v1.ALERT_ROWS)
    finally:
        db.close()
    return path


@pytest.fixture
def migrated(v1_file: Path) -> Iterator[Database]:
    database = open_database(v1_file)
    yield database
    database.close()


def test_it_migrates_to_the_latest_schema(migrated: Database) -> None:
    assert migrated.schema_version() == len(MIGRATIONS)
    assert migrated.rows("SELECT fingerprint, format FROM findings") == [(frozen_v1.FINDING.fingerprint, 1)]


def test_its_finding_reads_back_whole(migrated: Database) -> None:
    store = Store(migrated)
    [finding] = store.findings(FindingQuery(states=(State.RESOLVED,), labels={"pod": 'vllm-"0"\\ü'}))
    assert without_nan(finding) == without_nan(frozen_v1.FINDING)
    assert [without_nan(f) for f in store.episodes(frozen_v1.FINDING.fingerprint)] == [without_nan(finding)]


def test_its_target_states_read_back(migrated: Database) -> None:
    at = datetime(2026, 11, 29, 15, 4, 44, tzinfo=UTC)
    assert sorted(Store(migrated).states(), key=lambda s: s.symptom) == [
        TargetState(
            "queue_backlog",
            {"namespace": "prod", "pod": "vllm-0"},
            True,
            {"detect": 20.0, "kv_pool_full": 0.97},
            at,
            Trigger.ALERT,
        ),
        TargetState(
            "ttft_high", {"pod": "vllm-1"}, None, {}, datetime(2026, 11, 29, 15, 5, 44, tzinfo=UTC), Trigger.ROUND
        ),
    ]


def test_its_delivery_memory_reads_back(migrated: Database) -> None:
    memory = DeliveryMemory(migrated)
    key = ("0d6ac019b0dad439", "firing", "2026-11-29T14:24:44+00:00")
    record = memory.alert(key)
    assert record is not None
    assert (record.outcome, record.attempts, record.error) == (
        "failed",
        1,
        "SourceUnavailable: cannot reach Prometheus",
    )
    assert record.request == {"symptom": "queue_backlog", "scope": {"namespace": "prod"}}
    assert (record.received_at, record.updated_at) == (
        datetime(2026, 11, 29, 14, 25, 44, tzinfo=UTC),
        datetime(2026, 11, 29, 14, 26, 44, tzinfo=UTC),
    )
    assert memory.alerts_by_outcome("failed") == [record]


def test_it_takes_new_rows_beside_the_old_ones(migrated: Database) -> None:
    store = Store(migrated)
    old = frozen_v1.FINDING
    later = old.phase.active_at + timedelta(hours=6)
    store.save([replace(old, phase=Phase(State.FIRING, later, later))])
    assert [f.phase.active_at for f in store.episodes(old.fingerprint)] == [later, old.phase.active_at]
    assert migrated.rows("SELECT format FROM findings") == [(1,), (1,)]
