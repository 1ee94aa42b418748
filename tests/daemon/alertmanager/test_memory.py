"""The delivery memory on each backend (SQLite, PostgreSQL): what became of each alert state, kept
across a restart, a re-send remembered from its last delivery, and retention that never forgets what
is still queued."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from diagnosd.daemon.alertmanager.memory import AlertRecord, DeliveryMemory
from diagnosd.storage import open_database
from tests.findings.builders import AT

KEY = ("abc", "firing", "2026-11-29T14:24:44+00:00")


@pytest.fixture
def memory(database_location: Path | str) -> Iterator[DeliveryMemory]:
    database = open_database(database_location)
    yield DeliveryMemory(database)
    database.close()


def test_what_became_of_an_alert_state(memory: DeliveryMemory) -> None:
    assert memory.alert(KEY) is None
    memory.remember(KEY, {"symptom": "queue_backlog"}, "queued", AT)
    memory.mark(KEY, "failed", AT + timedelta(seconds=1), "cannot reach Prometheus")
    memory.mark(KEY, "failed", AT + timedelta(seconds=2), "cannot reach Prometheus")
    record = memory.alert(KEY)
    assert record is not None
    assert (record.outcome, record.attempts, record.error) == ("failed", 2, "cannot reach Prometheus")
    assert (record.received_at, record.updated_at) == (AT, AT + timedelta(seconds=2))
    memory.mark(KEY, "superseded", AT + timedelta(seconds=3))
    assert memory.alert(KEY) == AlertRecord(
        KEY, "superseded", 2, {"symptom": "queue_backlog"}, AT, AT + timedelta(seconds=3), None
    )


def test_remembering_a_known_state_again_keeps_its_request(memory: DeliveryMemory) -> None:
    memory.remember(KEY, {"symptom": "queue_backlog"}, "failed", AT)
    memory.remember(KEY, {"symptom": "other"}, "queued", AT + timedelta(seconds=3))
    again = memory.alert(KEY)
    assert again is not None
    assert (again.outcome, again.request, again.received_at) == ("queued", {"symptom": "queue_backlog"}, AT)
    assert [r.key for r in memory.alerts_by_outcome("queued")] == [KEY]
    assert memory.alerts_by_outcome("failed") == []


def test_many_states_at_once_oldest_first(memory: DeliveryMemory) -> None:
    late = ("late", "firing", "t")
    memory.remember(late, {"n": 0}, "queued", AT + timedelta(seconds=5))
    memory.remember_all([(("b", "firing", "t"), {"n": 2}), (("a", "resolved", "t"), {"n": 1})], "queued", AT)
    queued = memory.alerts_by_outcome("queued")
    assert [r.key for r in queued][-1] == late
    assert {r.key: r.request for r in queued[:2]} == {("b", "firing", "t"): {"n": 2}, ("a", "resolved", "t"): {"n": 1}}


def test_a_restart_remembers(database_location: Path | str) -> None:
    first = open_database(database_location)
    DeliveryMemory(first).remember(KEY, {"x": 1}, "done", AT)
    first.close()
    again = open_database(database_location)
    record = DeliveryMemory(again).alert(KEY)
    again.close()
    assert record is not None
    assert (record.outcome, record.request) == ("done", {"x": 1})


def test_a_resent_alert_is_remembered_from_its_last_delivery(memory: DeliveryMemory) -> None:
    memory.remember(KEY, {}, "done", AT)
    memory.touch([KEY], AT + timedelta(days=3))
    assert memory.purge(AT + timedelta(days=2)) == 0
    assert memory.alert(KEY) is not None
    assert memory.purge(AT + timedelta(days=4)) == 1
    assert memory.alert(KEY) is None


def test_retention_never_forgets_what_is_queued(memory: DeliveryMemory) -> None:
    memory.remember(("old", "firing", "t"), {}, "done", AT)
    memory.remember(("waiting", "firing", "t"), {}, "queued", AT)
    assert memory.purge(AT) == 0
    assert memory.purge(AT + timedelta(days=1)) == 1
    assert memory.alert(("old", "firing", "t")) is None
    assert memory.alert(("waiting", "firing", "t")) is not None


def test_retention_works_in_chunks(memory: DeliveryMemory) -> None:
    for i in range(5):
        memory.remember((f"fp{i}", "firing", "t"), {}, "done", AT)
    assert [memory.purge(AT + timedelta(days=1), chunk=2) for _ in range(4)] == [2, 2, 1, 0]
