"""The tracker applies diagnoses to findings through the store: lifecycle, gone targets, alert
resolution, and the memory of a restart (a new Tracker on the same store)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from diagnosd.findings.lifecycle import ResolvedBy, State, Trigger
from diagnosd.findings.model import Verdict
from diagnosd.findings.store import FindingQuery, Store
from diagnosd.findings.tracker import Tracker
from tests.findings.builders import AT, clear, diagnosis, fleetwide, holding, unknown

ZERO = timedelta(0)


@pytest.fixture
def store(database_location: Path | str) -> Iterator[Store]:
    opened = Store.open(database_location)
    yield opened
    opened.close()


def record(
    tracker: Tracker, *targets: object, minutes: int = 0, hold: timedelta = ZERO, **options: object
) -> list[State]:
    changed = tracker.record(
        diagnosis(*targets),  # type: ignore[arg-type]
        trigger=Trigger.ROUND,
        now=AT + timedelta(minutes=minutes),
        for_=hold,
        **options,  # type: ignore[arg-type]
    )
    return [f.state for f in changed]


def test_holds_fires_then_clear_resolves(store: Store) -> None:
    tracker = Tracker(store)
    assert record(tracker, holding()) == [State.FIRING]
    assert record(tracker, holding(), minutes=1) == [State.FIRING]  # last_seen and evidence refreshed
    assert record(tracker, clear(), minutes=2) == [State.RESOLVED]
    assert tracker.active() == []
    [episode] = store.episodes(store.findings(FindingQuery())[0].fingerprint)
    assert episode.resolved_by is ResolvedBy.CLEAR
    assert episode.last_seen == AT + timedelta(minutes=1)
    assert episode.phase.resolved_at == AT + timedelta(minutes=2)


def test_for_keeps_it_pending_and_a_clear_pending_is_forgotten(store: Store) -> None:
    tracker = Tracker(store)
    hold = timedelta(minutes=2)
    assert record(tracker, holding(), hold=hold) == [State.PENDING]
    assert record(tracker, holding(), minutes=1, hold=hold) == [State.PENDING]
    assert record(tracker, clear(), minutes=1, hold=hold) == []
    assert store.findings(FindingQuery()) == []
    assert record(tracker, holding(), minutes=3, hold=hold) == [State.PENDING]
    assert record(tracker, holding(), minutes=5, hold=hold) == [State.FIRING]


def test_unknown_changes_nothing(store: Store) -> None:
    tracker = Tracker(store)
    record(tracker, holding())
    assert record(tracker, unknown(), minutes=5) == []
    assert [f.state for f in tracker.active()] == [State.FIRING]


def test_a_target_missing_from_a_complete_round_is_gone(store: Store) -> None:
    tracker = Tracker(store)
    record(tracker, holding("vllm-0"), holding("vllm-1"))
    record(tracker, holding("vllm-1"), minutes=1)  # incomplete: vllm-0 unknown, stays
    assert sorted(f.labels["pod"] for f in tracker.active()) == ["vllm-0", "vllm-1"]
    assert record(tracker, holding("vllm-1"), minutes=2, complete_scope={"namespace": "other"}) == [State.FIRING]
    assert record(tracker, holding("vllm-1"), minutes=3, complete_scope={"namespace": "prod"}) == [
        State.FIRING,
        State.RESOLVED,
    ]
    gone = [f for f in store.findings(FindingQuery(states=(State.RESOLVED,)))]
    assert [(f.labels["pod"], f.resolved_by) for f in gone] == [("vllm-0", ResolvedBy.GONE)]


def test_resolved_alert_resolves_only_what_it_alone_reported(store: Store) -> None:
    tracker = Tracker(store)
    for alert in ("alert-a", "alert-b"):
        tracker.record(diagnosis(holding()), trigger=Trigger.ALERT, now=AT, for_=ZERO, alert=alert)
    tracker.record(diagnosis(holding("vllm-1")), trigger=Trigger.ALERT, now=AT, for_=ZERO, alert="alert-a")
    changed = tracker.resolve_alert("alert-a", AT + timedelta(minutes=1))
    assert sorted((f.labels["pod"], f.state, f.alerts) for f in changed) == [
        ("vllm-0", State.FIRING, ("alert-b",)),
        ("vllm-1", State.RESOLVED, ()),
    ]
    assert tracker.resolve_alert("alert-a", AT + timedelta(minutes=2)) == []
    assert [f.state for f in tracker.resolve_alert("alert-b", AT + timedelta(minutes=3))] == [State.RESOLVED]


def test_a_new_tracker_on_the_same_store_remembers(store: Store, database_location: Path | str) -> None:
    first = Tracker(store)
    record(first, holding("vllm-0"), holding("vllm-1"))
    store.close()
    reopened = Store.open(database_location)
    second = Tracker(reopened)
    try:
        assert sorted(f.labels["pod"] for f in second.active()) == ["vllm-0", "vllm-1"]
        assert len(second.states(AT, timedelta(minutes=10))) == 2
        assert record(second, clear("vllm-0"), minutes=1) == [State.RESOLVED]
    finally:
        reopened.close()


def test_transitions_are_reported_once_each(store: Store) -> None:
    seen: list[State] = []
    tracker = Tracker(store, seen.append)
    hold = timedelta(minutes=1)
    record(tracker, holding(), hold=hold)
    record(tracker, holding(), minutes=1, hold=hold)
    record(tracker, holding(), minutes=2, hold=hold)
    record(tracker, clear(), minutes=3, hold=hold)
    assert seen == [State.PENDING, State.FIRING, State.RESOLVED]


def test_target_states_follow_the_last_diagnosis_and_expire(store: Store) -> None:
    tracker = Tracker(store)
    record(tracker, holding("vllm-0"), clear("vllm-1"))
    states = {s.labels["pod"]: s for s in tracker.states(AT, timedelta(minutes=10))}
    assert states["vllm-0"].values == {"detect": 20.0, "kv_pool_full": 0.95}
    assert states["vllm-1"].values["kv_pool_full"] == 0.5
    record(tracker, holding("vllm-0"), complete_scope={})
    assert [s.labels["pod"] for s in tracker.states(AT, timedelta(minutes=10))] == ["vllm-0"]
    assert tracker.states(AT + timedelta(minutes=11), timedelta(minutes=10)) == []
    assert tracker.expire(AT + timedelta(minutes=11), timedelta(minutes=10)) == 1
    assert store.states() == []


def test_a_fleet_level_finding_fires_and_a_complete_round_does_not_call_it_gone(store: Store) -> None:
    tracker = Tracker(store)
    at = AT
    changed = tracker.record(fleetwide(True, Verdict.MATCHED), trigger=Trigger.ROUND, now=at, for_=ZERO)
    assert [(f.cause, f.labels, f.state) for f in changed] == [("idle_gpus", {"level": "fleet"}, State.FIRING)]
    later = at + timedelta(minutes=1)
    again = tracker.record(
        fleetwide(True, Verdict.MATCHED), trigger=Trigger.ROUND, now=later, for_=ZERO, complete_scope={}
    )
    assert [f.state for f in again] == [State.FIRING]  # refreshed, not resolved as gone
    end = at + timedelta(minutes=2)
    cleared = tracker.record(
        fleetwide(True, Verdict.CLEAR), trigger=Trigger.ROUND, now=end, for_=ZERO, complete_scope={}
    )
    assert [f.state for f in cleared] == [State.RESOLVED]
