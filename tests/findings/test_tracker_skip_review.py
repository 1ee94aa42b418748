"""Review of 136e3e1: `Tracker._changes` steps a clear observation only where its cause holds among
the symptom's active findings, and an unknown one not at all. Claimed: the same outcome as before.

Checked against the tracker as it was (every observation stepped, unknown returning at once), the
same operations on two stores: findings written, resolved, forgotten, target states, transitions.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from diagnosd.findings.fingerprint import fingerprint, labels_key
from diagnosd.findings.lifecycle import Finding, Observed, ResolvedBy, State, Trigger
from diagnosd.findings.model import CheckResult, Diagnosis, FleetResult, TargetDiagnosis, Verdict
from diagnosd.findings.observe import Observation, fleet_labels, observe
from diagnosd.findings.store import FindingQuery, Store
from diagnosd.findings.target import TargetState, target_state
from diagnosd.findings.tracker import Recording, Tracker, _within, _within_labels
from tests.findings.builders import AT, cause, check, clear, diagnosis, holding, target

ZERO = timedelta(0)
SYMPTOMS = ("queue_backlog", "ttft_high")
PODS = ("vllm-0", "vllm-1", "vllm-2")
CAUSES = ("kv_pool_full", "cache_thrash")
SCOPES: tuple[Mapping[str, str], ...] = ({}, {"namespace": "prod"}, {"pod": "vllm-1"})
ALERTS = ("a1", "a2", "a3")


class PreviousTracker(Tracker):
    """The tracker of 136e3e1^: `_changes` as it was (every observation stepped), and `_step`
    returning at once for an unknown observation."""

    def __init__(self, store: Store, on_transition: Callable[[State], None] | None = None) -> None:
        super().__init__(store, on_transition)
        self.stepped: Counter[str] = Counter()  # what each stepped observation met

    def _changes(
        self,
        diagnosis: Diagnosis,
        trigger: Trigger,
        now: datetime,
        for_: timedelta,
        alert: str | None,
        complete_scope: Mapping[str, str] | None,
    ) -> tuple[dict[str, Finding], list[Finding], list[TargetState], list[tuple[str, str]]]:
        changed: dict[str, Finding] = {}
        forgotten: list[Finding] = []
        for o in observe(diagnosis):
            self._step(o, now, for_, trigger, alert, diagnosis.evaluated_at, changed, forgotten)
        seen = {labels_key(t.labels) for t in diagnosis.targets}
        if diagnosis.fleet:
            seen.add(labels_key(fleet_labels(diagnosis)))
        # Since narrowed rounds: where the symptom is clear, every active finding on the target
        # ends (on the fleet's labels too where it is clear on every target), its cause among the
        # target's checks or not. Spelled here the naive way, one clear observation each.
        absent = [t.labels for t in diagnosis.targets if t.symptom_present is False]
        if absent and len(absent) == len(diagnosis.targets):
            absent.append(fleet_labels(diagnosis))
            seen.add(labels_key(fleet_labels(diagnosis)))
        stepped = {f.fingerprint for f in (*changed.values(), *forgotten)}
        for f in list(self._active.values()):
            if f.symptom == diagnosis.symptom and f.fingerprint not in stepped and f.labels in absent:
                o = Observation(diagnosis.symptom, f.cause, f.labels, Observed.CLEAR)
                self._step(o, now, for_, trigger, alert, diagnosis.evaluated_at, changed, forgotten)
        if complete_scope is not None:
            for f in self._active.values():
                if f.symptom == diagnosis.symptom and labels_key(f.labels) not in seen and _within(f, complete_scope):
                    self._resolve(f, now, ResolvedBy.GONE, changed, forgotten)
        states = [target_state(diagnosis.symptom, t, diagnosis.evaluated_at, trigger) for t in diagnosis.targets]
        removed = []
        if complete_scope is not None:
            removed = [
                key
                for key, s in self._states.items()
                if s.symptom == diagnosis.symptom and key[1] not in seen and _within_labels(s.labels, complete_scope)
            ]
        return changed, forgotten, states, removed

    def _step(
        self,
        o: Observation,
        now: datetime,
        for_: timedelta,
        trigger: Trigger,
        alert: str | None,
        evaluated_at: datetime,
        changed: dict[str, Finding],
        forgotten: list[Finding],
    ) -> None:
        if o.seen is Observed.UNKNOWN:
            self.stepped["unknown"] += 1
            return
        if o.seen is Observed.CLEAR:
            fp = fingerprint(o.symptom, o.cause, o.labels)
            self.stepped["clear, a finding" if (changed.get(fp) or self._active.get(fp)) else "clear, none"] += 1
        super()._step(o, now, for_, trigger, alert, evaluated_at, changed, forgotten)


@dataclass
class World:
    """One store with two replicas on it (each its own connection), and what they reported."""

    stores: list[Store]
    trackers: list[Tracker]
    transitions: list[tuple[int, State]] = field(default_factory=list)

    def snapshot(self) -> tuple[object, ...]:
        store = self.stores[0]
        findings = sorted(store.findings(FindingQuery(limit=100_000)), key=lambda f: (f.fingerprint, f.phase.active_at))
        states = sorted(store.states(), key=lambda s: s.key)
        memory = [(t.active(), sorted(t.states(AT, timedelta(days=365)), key=lambda s: s.key)) for t in self.trackers]
        return findings, states, memory, self.transitions


def world(path: Path, tracker: type[Tracker]) -> World:
    first = Store.open(path)
    second = Store.open(path)
    w = World([first, second], [])
    for n, store in enumerate((first, second)):
        w.trackers.append(tracker(store, on_transition=reporter(w, n)))
    return w


def reporter(w: World, n: int) -> Callable[[State], None]:
    def report(state: State) -> None:
        w.transitions.append((n, state))

    return report


@pytest.fixture
def worlds(tmp_path: Path) -> Iterator[tuple[World, World]]:
    before, after = world(tmp_path / "before.db", PreviousTracker), world(tmp_path / "after.db", Tracker)
    yield before, after
    for w in (before, after):
        for s in w.stores:
            s.close()


def changes(findings: Sequence[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.fingerprint, f.phase.active_at))


def test_the_previous_tracker_steps_the_clear_observations_the_new_one_skips(
    worlds: tuple[World, World],
) -> None:
    """Else the comparison below proves nothing."""
    before, _ = worlds
    previous = before.trackers[0]
    assert isinstance(previous, PreviousTracker)
    previous.record(diagnosis(clear(), clear("vllm-1")), trigger=Trigger.ROUND, now=AT, for_=ZERO)
    assert previous.stepped == {"clear, none": 2}


# Targeted cases of the brief: each recorded on both trackers, with the outcome asserted too.


@dataclass(frozen=True)
class Record:
    recordings: Sequence[Recording]
    now: datetime = AT
    for_: timedelta = ZERO


@dataclass(frozen=True)
class Resolve:
    alert: str
    now: datetime


@dataclass(frozen=True)
class Reload:
    pass


Op = tuple[int, Record | Resolve | Reload]  # (which replica, what it does)


def both(worlds: tuple[World, World], *ops: Op) -> list[list[list[Finding]]]:
    """Run `ops` on both worlds; assert they agree; return the new one's results."""
    results: list[list[list[list[Finding]]]] = []
    for w in worlds:
        results.append([run(w.trackers[replica], op) for replica, op in ops])
    before, after = worlds
    assert results[0] == results[1]
    assert before.snapshot() == after.snapshot()
    return results[1]


def run(tracker: Tracker, op: Record | Resolve | Reload) -> list[list[Finding]]:
    if isinstance(op, Record):
        done = tracker.record_many(op.recordings, trigger=Trigger.ROUND, now=op.now, for_=op.for_)
        return [changes(c) for c in done]
    if isinstance(op, Resolve):
        return [changes(tracker.resolve_alert(op.alert, op.now))]
    tracker.reload()
    return []


def rec(*targets: TargetDiagnosis, minutes: int = 0, hold: timedelta = ZERO) -> Record:
    return Record([Recording(diagnosis(*targets))], AT + timedelta(minutes=minutes), hold)


def test_a_pending_finding_clears_and_is_forgotten(worlds: tuple[World, World]) -> None:
    hold = timedelta(minutes=5)
    out = both(worlds, (0, rec(holding(), hold=hold)), (0, rec(clear(), minutes=1, hold=hold)))
    assert [f.state for f in out[0][0]] == [State.PENDING]
    assert out[1] == [[]]
    assert worlds[1].stores[0].findings(FindingQuery()) == []


def test_a_finding_another_replica_wrote_clears_here(worlds: tuple[World, World]) -> None:
    out = both(worlds, (1, rec(holding())), (0, rec(clear(), minutes=1)))
    assert [f.state for f in out[1][0]] == [State.RESOLVED]
    assert worlds[1].trackers[0].active() == []


def test_a_pending_finding_another_replica_wrote_clears_here(worlds: tuple[World, World]) -> None:
    hold = timedelta(minutes=5)
    both(worlds, (1, rec(holding(), hold=hold)), (0, rec(clear(), minutes=1, hold=hold)))
    assert worlds[1].stores[0].findings(FindingQuery()) == []


def test_a_batch_part_clears_what_an_earlier_part_raised(worlds: tuple[World, World]) -> None:
    parts = [Recording(diagnosis(holding()), alert="a1"), Recording(diagnosis(clear()), alert="a2")]
    out = both(worlds, (0, Record(parts)))
    assert [f.state for f in out[0][0]] == [State.FIRING]
    assert [f.state for f in out[0][1]] == [State.RESOLVED]


def test_a_batch_part_clears_a_pending_one_an_earlier_part_raised(worlds: tuple[World, World]) -> None:
    parts = [Recording(diagnosis(holding())), Recording(diagnosis(clear()))]
    out = both(worlds, (0, Record(parts, AT, timedelta(minutes=5))))
    assert out[0][1] == []
    assert worlds[1].stores[0].findings(FindingQuery()) == []


def test_a_cause_held_under_another_symptom_is_not_cleared_by_this_one(worlds: tuple[World, World]) -> None:
    other = [Recording(replace(diagnosis(holding()), symptom="ttft_high"))]
    here = [Recording(diagnosis(clear()))]
    out = both(worlds, (0, Record(other)), (0, Record(here, AT + timedelta(minutes=1))))
    assert out[1] == [[]]
    [f] = worlds[1].trackers[0].active()
    assert (f.symptom, f.state) == ("ttft_high", State.FIRING)


def test_a_fleet_finding_clears(worlds: tuple[World, World]) -> None:
    def fleet(verdict: Verdict) -> Diagnosis:
        result = FleetResult(check("idle_gpus", verdict, 3.0, "idle_gpus"), cause("idle_gpus", 3.0))
        d = diagnosis(target("vllm-0", True, [check("idle_gpus", Verdict.UNKNOWN, None, "idle_gpus")]))
        if verdict is not Verdict.MATCHED:
            result = replace(result, finding=None)
        return replace(d, scope={"namespace": "prod"}, fleet=(result,))

    out = both(
        worlds,
        (0, Record([Recording(fleet(Verdict.MATCHED))], AT, ZERO)),
        (0, Record([Recording(fleet(Verdict.CLEAR))], AT + timedelta(minutes=1), ZERO)),
    )
    assert [(f.labels, f.state) for f in out[1][0]] == [({"namespace": "prod", "level": "fleet"}, State.RESOLVED)]


# Randomized: sequences of rounds, batches, alert resolutions and reloads on two replicas.


def random_target(rng: random.Random, pod: str) -> TargetDiagnosis:
    present = rng.choice((True, True, False, None))
    checks: list[CheckResult] = []
    held: list[str] = []
    for c in CAUSES:
        kind = rng.choice(("holds", "clear", "clear", "unknown", "skipped", "absent"))
        if kind == "absent":
            continue
        if kind == "holds" and present:
            checks.append(check(c, Verdict.MATCHED, 0.95, c))
            held.append(c)
        elif kind == "holds":
            checks.append(check(c, Verdict.MATCHED, 0.95, c))  # matched, symptom not there: possible
        elif kind == "skipped":
            checks.append(check(f"{c}-gate", rng.choice((Verdict.CLEAR, Verdict.UNKNOWN)), 0.5))
            checks.append(check(c, Verdict.SKIPPED, None, c, parent=f"{c}-gate"))
        else:
            checks.append(check(c, Verdict.CLEAR if kind == "clear" else Verdict.UNKNOWN, 0.5, c))
    return target(pod, present, checks, held)


def random_diagnosis(rng: random.Random, at: datetime) -> Diagnosis:
    pods = [p for p in PODS if rng.random() < 0.7]
    d = diagnosis(*(random_target(rng, p) for p in pods), symptom=rng.choice(SYMPTOMS))
    fleet: tuple[FleetResult, ...] = ()
    if rng.random() < 0.4:
        verdict = rng.choice((Verdict.MATCHED, Verdict.CLEAR, Verdict.UNKNOWN, Verdict.SKIPPED))
        found = cause("idle_gpus", 3.0) if verdict is Verdict.MATCHED else None
        fleet = (FleetResult(check("idle_gpus", verdict, 3.0, "idle_gpus"), found),)
    return replace(d, evaluated_at=at, scope=dict(rng.choice(SCOPES[:2])), fleet=fleet)


def refused() -> bool:
    return False


def random_op(rng: random.Random, minute: int) -> Op:
    replica = rng.choice((0, 0, 1))
    now = AT + timedelta(minutes=minute)
    roll = rng.random()
    if roll < 0.1:
        return replica, Resolve(rng.choice(ALERTS), now)
    if roll < 0.15:
        return replica, Reload()
    recordings = []
    for _ in range(rng.choice((1, 1, 2, 3))):
        d = random_diagnosis(rng, now)
        alert = rng.choice((None, *ALERTS))
        scope = rng.choice((None, None, *SCOPES))
        claim = None if rng.random() < 0.8 else refused
        recordings.append(Recording(d, alert, scope, claim))
    return replica, Record(recordings, now, rng.choice((ZERO, ZERO, timedelta(minutes=2))))


def test_random_sequences_end_as_before(tmp_path: Path) -> None:
    """40 sequences of 30 operations; each step's changes, the store, each replica's memory and
    the transitions agree. What the sequences reached is counted, so they prove something."""
    reached: Counter[str] = Counter()
    for seed in range(40):
        rng = random.Random(seed)
        before = world(tmp_path / f"before-{seed}.db", PreviousTracker)
        after = world(tmp_path / f"after-{seed}.db", Tracker)
        try:
            minute = 0
            for step in range(30):
                minute += rng.choice((0, 1, 1, 3))
                replica, op = random_op(rng, minute)
                old, new = run(before.trackers[replica], op), run(after.trackers[replica], op)
                assert old == new, (seed, step)
                assert before.snapshot() == after.snapshot(), (seed, step)
                for done in new:
                    reached.update(f"{f.state}:{f.resolved_by}" for f in done)
            for t in before.trackers:
                assert isinstance(t, PreviousTracker)
                reached.update(t.stepped)
        finally:
            for s in (*before.stores, *after.stores):
                s.close()
    for kind in (
        "resolved:clear",
        "resolved:target_gone",
        "resolved:alert_resolved",
        "pending:None",
        "firing:None",
        "clear, a finding",
        "clear, none",
        "unknown",
    ):
        assert reached[kind] > 0, (kind, reached)
