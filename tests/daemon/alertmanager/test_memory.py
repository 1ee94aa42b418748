"""The delivery memory on each backend (SQLite, PostgreSQL): what became of each alert state, kept
across a restart, a re-send remembered from its last delivery, and retention that never forgets what
is still queued."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from diagnosd.daemon.alertmanager.memory import AlertRecord, DeliveryMemory, Key, Lease
from diagnosd.storage import Database, open_database
from diagnosd.storage.database import Args, Row
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
    forgotten = ("gone", "firing", "t")  # purged meanwhile (another replica's retention)
    assert memory.touch([KEY, forgotten], AT + timedelta(days=3)) == {KEY}
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


# Batches: the states a storm brings, looked up and marked many at a time, as one at a time would.
KINDS = ("mine", "theirs", "done", "failed", "unknown")
ME, THEM = Lease("me", AT, AT + timedelta(seconds=30)), Lease("them", AT, AT + timedelta(seconds=30))


def storm(memory: DeliveryMemory, prefix: str, count: int) -> dict[str, list[Key]]:
    """`count` states, by what became of them: held queued here, held queued by another replica,
    done already, failed and held by nobody, never seen."""
    keys: dict[str, list[Key]] = {kind: [] for kind in KINDS}
    for n in range(count):
        keys[KINDS[n % len(KINDS)]].append((f"{prefix}-{n}", "firing", "t"))
    memory.claim_new([(key, {"n": 1}) for key in keys["mine"] + keys["done"]], ME)
    memory.claim_new([(key, {"n": 2}) for key in keys["theirs"]], THEM)
    for key in keys["done"]:
        memory.mark(key, "done", AT, owner="me")
    memory.remember_all([(key, {"n": 3}) for key in keys["failed"]], "failed", AT)
    return keys


def rows(memory: DeliveryMemory, keys: list[Key]) -> list[tuple[object, ...] | None]:
    """What the store holds for each key, its prefix left out (the twins differ in it)."""
    return [
        (
            r.key[0].split("-")[1],
            *r.key[1:],
            r.outcome,
            r.attempts,
            r.request,
            r.received_at,
            r.updated_at,
            r.error,
            r.owner,
            r.lease_until,
        )
        if (r := memory.alert(key))
        else None
        for key in keys
    ]


def test_many_states_looked_up_at_once_as_one_by_one(memory: DeliveryMemory) -> None:
    keys = [key for kind in storm(memory, "fp", 260).values() for key in kind]  # past two chunks
    one_by_one = {key: record for key in keys if (record := memory.alert(key)) is not None}
    assert len(one_by_one) == 208  # every kind but the unknown
    assert memory.alerts([*keys, *keys[:20]]) == one_by_one  # a key named twice is found once
    assert memory.alerts([]) == {}


@pytest.mark.parametrize(("outcome", "owner"), [("done", "me"), ("failed", "me"), ("failed", None)])
def test_many_states_marked_at_once_as_one_by_one(memory: DeliveryMemory, outcome: str, owner: str | None) -> None:
    one, many = storm(memory, "one", 260), storm(memory, "many", 260)
    later = AT + timedelta(seconds=5)
    marked_one = {key for kind in one.values() for key in kind if memory.mark(key, outcome, later, "why", owner)}
    marked_many = memory.mark_all([key for kind in many.values() for key in kind], outcome, later, "why", owner)
    # With an owner only the states still queued and its own; without, every state there is.
    held = ["mine"] if owner else ["mine", "theirs", "done", "failed"]
    assert marked_one == {key for kind in held for key in one[kind]}
    assert marked_many == {key for kind in held for key in many[kind]}
    for kind in KINDS:
        assert rows(memory, many[kind]) == rows(memory, one[kind]), kind


def test_a_state_named_twice_in_one_mark_is_marked_once(memory: DeliveryMemory) -> None:
    memory.remember(KEY, {}, "queued", AT)
    assert memory.mark_all([KEY, KEY], "failed", AT, "down") == {KEY}
    record = memory.alert(KEY)
    assert record is not None
    assert (record.outcome, record.attempts) == ("failed", 1)


@dataclass
class Recorded:
    """The database, and every statement read through it (what the batch methods ask it)."""

    database: Database
    asked: list[tuple[str, Args]] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.database, name)

    def rows(self, sql: str, args: Args = ()) -> list[Row]:
        self.asked.append((sql, args))
        return self.database.rows(sql, args)


def test_a_batch_finds_its_states_by_the_key_not_by_a_scan(tmp_path: Path) -> None:
    database = open_database(tmp_path / "diagnosd.db")
    recorded = Recorded(database)
    memory = DeliveryMemory(recorded)
    keys = storm(memory, "fp", 10)["mine"]
    recorded.asked.clear()
    assert len(memory.alerts(keys)) == len(memory.mark_all(keys, "done", AT, owner="me")) == 2
    plans = [database.rows(f"EXPLAIN QUERY PLAN {sql}", args) for sql, args in recorded.asked]
    database.close()
    assert len(plans) == 2  # the lookup and the mark
    for plan in plans:
        assert not any(str(step[-1]).startswith("SCAN alerts") for step in plan), plan
