"""The tracker applies diagnoses to findings through the store: lifecycle, gone targets, alert
resolution, and the memory of a restart (a new Tracker on the same store)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from diagnosd.findings.lifecycle import Finding, ResolvedBy, State, Trigger
from diagnosd.findings.model import TargetDiagnosis, Verdict
from diagnosd.findings.store import FindingQuery, Store
from diagnosd.findings.target import TargetState
from diagnosd.findings.tracker import Recording, Tracker
from tests.findings.builders import AT, clear, diagnosis, fleetwide, holding, target, unknown
from tests.postgres import LocalPostgres

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


def absent(pod: str = "vllm-0") -> TargetDiagnosis:
    """The symptom clear on `pod`, its checks not walked (a narrowed round's clear target)."""
    return replace(target(pod, False, []), detect=replace(target(pod, False, []).detect, verdict=Verdict.CLEAR))


def test_a_target_where_the_symptom_is_clear_ends_its_findings_whatever_was_walked(store: Store) -> None:
    tracker = Tracker(store)
    assert record(tracker, holding("vllm-0"), holding("vllm-1")) == [State.FIRING, State.FIRING]
    changed = tracker.record(
        diagnosis(absent("vllm-0"), holding("vllm-1")), trigger=Trigger.ROUND, now=AT + timedelta(minutes=1), for_=ZERO
    )
    assert sorted((f.labels["pod"], f.state, f.resolved_by) for f in changed) == [
        ("vllm-0", State.RESOLVED, ResolvedBy.CLEAR),
        ("vllm-1", State.FIRING, None),  # seen holding again
    ]
    assert [f.labels["pod"] for f in tracker.active()] == ["vllm-1"]
    # Where the symptom is unknown, nothing ends: diagnosd could not look.
    later = AT + timedelta(minutes=2)
    assert tracker.record(diagnosis(unknown("vllm-1")), trigger=Trigger.ROUND, now=later, for_=ZERO) == []


def test_a_fleet_level_finding_ends_where_the_symptom_is_clear_on_every_target(store: Store) -> None:
    """No fleet-level result (a narrowed round walks nothing where the symptom is clear): the
    symptom is clear everywhere, so the fleet's cause is cleared, not called gone."""
    tracker = Tracker(store)
    tracker.record(fleetwide(True, Verdict.MATCHED), trigger=Trigger.ROUND, now=AT, for_=ZERO)
    later = AT + timedelta(minutes=1)
    mixed = tracker.record(diagnosis(absent("vllm-0"), unknown("vllm-1")), trigger=Trigger.ROUND, now=later, for_=ZERO)
    assert mixed == []  # one target could not be looked at: the fleet's cause may still hold
    end = AT + timedelta(minutes=2)
    cleared = tracker.record(
        diagnosis(absent("vllm-0"), absent("vllm-1")), trigger=Trigger.ROUND, now=end, for_=ZERO, complete_scope={}
    )
    assert [(f.labels, f.state, f.resolved_by) for f in cleared] == [
        ({"level": "fleet"}, State.RESOLVED, ResolvedBy.CLEAR)
    ]


# Many diagnoses in one transaction (an alert storm's parts), as the same recorded one by one.
@pytest.fixture
def twin(database_location: Path | str, request: pytest.FixtureRequest) -> Iterator[Store]:
    """A second store on the same backend, a database of its own."""
    if isinstance(database_location, Path):
        location: Path | str = database_location.with_name("twin.db")
    else:
        server: LocalPostgres = request.getfixturevalue("postgres_server")
        location = server.fresh_url()
    opened = Store.open(location)
    yield opened
    opened.close()


def storm(asked: list[int]) -> list[Recording]:
    """The parts of a storm that meet what came before (pending on vllm-0, vllm-1): a finding
    several alerts link, a claim refused, a pending one cleared, a second symptom, a complete
    scope that finds vllm-0 gone, and vllm-0 back as a new episode."""

    def claim(n: int) -> Callable[[], bool]:
        def mine() -> bool:
            asked.append(n)
            return n != 2

        return mine

    parts = [
        (diagnosis(holding("vllm-0")), None),
        (diagnosis(holding("vllm-0")), None),
        (diagnosis(holding("vllm-0"), clear("vllm-1")), None),
        (diagnosis(holding("vllm-2"), symptom="kv_hit_low"), None),
        (diagnosis(holding("vllm-2"), symptom="kv_hit_low"), None),
        (diagnosis(holding("vllm-3")), {"namespace": "prod"}),
        (diagnosis(clear("vllm-3")), None),
        (diagnosis(holding("vllm-0")), None),
    ]
    return [Recording(d, f"a-{n}", scope, claim(n)) for n, (d, scope) in enumerate(parts, start=1)]


def before(tracker: Tracker) -> None:
    tracker.record(
        diagnosis(holding("vllm-0"), holding("vllm-1")), trigger=Trigger.ALERT, now=AT, for_=HOLD, alert="a-0"
    )


HOLD, LATER = timedelta(minutes=1), AT + timedelta(minutes=2)


def stored(store: Store) -> tuple[list[Finding], list[TargetState]]:
    """Every episode and every target state the store holds, in one order."""
    episodes = sorted(store.findings(FindingQuery(limit=1000)), key=lambda f: (f.fingerprint, f.phase.active_at))
    return episodes, sorted(store.states(), key=lambda s: s.key)


def test_a_batch_is_recorded_as_the_same_diagnoses_one_by_one(store: Store, twin: Store) -> None:
    seen_one: list[State] = []
    seen_many: list[State] = []
    one, many = Tracker(store, seen_one.append), Tracker(twin, seen_many.append)
    before(one)
    before(many)
    asked_one: list[int] = []
    asked_many: list[int] = []
    changed_one = [
        one.record(
            r.diagnosis,
            trigger=Trigger.ALERT,
            now=LATER,
            for_=HOLD,
            alert=r.alert,
            complete_scope=r.complete_scope,
            claim=r.claim,
        )
        for r in storm(asked_one)
    ]
    changed_many = many.record_many(storm(asked_many), trigger=Trigger.ALERT, now=LATER, for_=HOLD)
    assert changed_many == changed_one
    assert asked_many == asked_one == list(range(1, 9))
    assert seen_many == seen_one
    assert stored(twin) == stored(store)
    assert many.active() == one.active() == Tracker(twin).active()
    assert many.states(LATER, HOLD) == one.states(LATER, HOLD)
    # What the storm did, so that two trackers doing nothing alike cannot pass.
    assert [len(c) for c in changed_many] == [1, 0, 1, 1, 1, 2, 0, 1]
    assert sorted((f.symptom, f.labels["pod"], f.state, f.alerts) for f in many.active()) == [
        ("kv_hit_low", "vllm-2", State.PENDING, ("a-4", "a-5")),
        ("queue_backlog", "vllm-0", State.PENDING, ("a-8",)),
    ]
    gone = [f for f in stored(twin)[0] if f.resolved_by is ResolvedBy.GONE]
    assert [f.alerts for f in gone] == [("a-0", "a-1", "a-3")]


def taken(store: Store) -> int:
    """How many findings transactions the store has seen (each takes the findings turn once)."""
    return int(store.database.rows("SELECT taken FROM turns WHERE name = ?", ("findings",))[0][0])


def test_a_batch_is_one_transaction(store: Store) -> None:
    tracker = Tracker(store)
    start = taken(store)
    tracker.record_many(storm([]), trigger=Trigger.ALERT, now=LATER, for_=HOLD)
    assert taken(store) == start + 1
    tracker.record(diagnosis(holding("vllm-5")), trigger=Trigger.ALERT, now=LATER, for_=HOLD)
    assert taken(store) == start + 2


class Refused(Exception):
    pass


def test_a_batch_that_fails_midway_writes_and_keeps_nothing(store: Store) -> None:
    tracker = Tracker(store)
    before(tracker)
    kept = stored(store), tracker.active(), tracker.states(LATER, HOLD)

    def boom() -> bool:
        raise Refused

    parts = storm([])
    parts.insert(4, Recording(diagnosis(holding("vllm-9")), "a-9", None, boom))
    with pytest.raises(Refused):
        tracker.record_many(parts, trigger=Trigger.ALERT, now=LATER, for_=HOLD)
    assert (stored(store), tracker.active(), tracker.states(LATER, HOLD)) == kept
