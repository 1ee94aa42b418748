"""Review of 47be684 (findings/tracker.py `_clear_where_absent`): where a diagnosis says the
symptom is clear on a target, every active finding of that symptom there resolves; where it is
clear on every target, the fleet-level one too. Claimed: the same outcome as before for whole
walks, and a narrowed round (clear targets without checks) ending as a whole round ends.

The adapted tests/findings/test_tracker_skip_review.py compares against a "previous" tracker that
now carries the new rule itself, so it no longer checks that claim. Checked here against the
tracker as it was before 47be684, on whole-walk diagnoses (every target lists a check of every
cause, fleet-level checks reported on every diagnosis of a sequence), and the new tracker on the
narrowed form of the same diagnoses (clear targets with their detect alone, no fleet result where
nothing was walked): findings, their changes, transitions and the targets' presence agree.

Found: no defect. The one difference from the old tracker: a fleet-level finding whose check is no
longer answered fleet-wide, on a round where the symptom is clear on every target, now resolves
as clear (the old tracker called it gone, or kept it when the round was incomplete): what
docs/daemon.md says of fleet-level findings.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from diagnosd.findings.fingerprint import labels_key
from diagnosd.findings.lifecycle import Finding, Observed, ResolvedBy, State, Trigger
from diagnosd.findings.model import CheckResult, Diagnosis, FleetResult, TargetDiagnosis, Verdict
from diagnosd.findings.observe import fleet_labels, observe
from diagnosd.findings.store import FindingQuery, Store
from diagnosd.findings.target import TargetState, target_state
from diagnosd.findings.tracker import Tracker, _within, _within_labels
from tests.findings.builders import AT, cause, check, diagnosis, target

ZERO = timedelta(0)
PODS = ("vllm-0", "vllm-1", "vllm-2")
CAUSES = ("kv_pool_full", "cache_thrash")
FLEET_CAUSE = "idle_gpus"
ALERTS = ("a1", "a2")


class OldTracker(Tracker):
    """The tracker before 47be684: a clear target's findings end only through its checks'
    observations, a fleet-level one only through a fleet result."""

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
        holding = {f.cause for f in self._active.values() if f.symptom == diagnosis.symptom}
        for o in observe(diagnosis):
            if o.seen is Observed.HOLDS or (o.seen is Observed.CLEAR and o.cause in holding):
                self._step(o, now, for_, trigger, alert, diagnosis.evaluated_at, changed, forgotten)
        seen = {labels_key(t.labels) for t in diagnosis.targets}
        if diagnosis.fleet:
            seen.add(labels_key(fleet_labels(diagnosis)))
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


@dataclass
class World:
    store: Store
    tracker: Tracker
    transitions: list[State] = field(default_factory=list)

    def snapshot(self) -> tuple[object, ...]:
        findings = sorted(
            self.store.findings(FindingQuery(limit=100_000)), key=lambda f: (f.fingerprint, f.phase.active_at)
        )
        # A narrowed round keeps only the detect's value of a clear target: its presence is compared.
        states = sorted((s.key, s.present) for s in self.store.states())
        # Transitions are counted (what the self-metrics show), not ordered: a clear target's
        # findings end after the others' steps where the diagnosis walked none of its checks.
        return findings, states, self.tracker.active(), Counter(self.transitions)


def world(path: Path, kind: type[Tracker]) -> World:
    store = Store.open(path)
    transitions: list[State] = []
    return World(store, kind(store, on_transition=transitions.append), transitions)


@pytest.fixture
def made(tmp_path: Path) -> Iterator[Callable[[str], tuple[World, World, World]]]:
    """made(name) -> the old tracker, the new one fed whole walks, the new one fed narrowed
    walks, each on a store of its own."""
    opened: list[World] = []

    def make(name: str) -> tuple[World, World, World]:
        three = (
            world(tmp_path / f"{name}-old.db", OldTracker),
            world(tmp_path / f"{name}-whole.db", Tracker),
            world(tmp_path / f"{name}-narrowed.db", Tracker),
        )
        opened.extend(three)
        return three

    yield make
    for w in opened:
        w.store.close()


def clear_target(pod: str) -> TargetDiagnosis:
    t = target(pod, False, [])
    return replace(t, detect=replace(t.detect, verdict=Verdict.CLEAR))


def whole_target(rng: random.Random, pod: str, fleet: bool) -> TargetDiagnosis:
    """A target as the whole walk gives it: a check of every cause, the fleet-level one unknown."""
    present = rng.choice((True, True, False, False, None))
    checks: list[CheckResult] = []
    held: list[str] = []
    for c in CAUSES:
        kind = rng.choice(("matched", "clear", "clear", "unknown", "skipped"))
        if kind == "skipped":
            checks.append(check(f"{c}-gate", rng.choice((Verdict.CLEAR, Verdict.UNKNOWN)), 0.5))
            checks.append(check(c, Verdict.SKIPPED, None, c, parent=f"{c}-gate"))
        elif kind == "matched":
            checks.append(check(c, Verdict.MATCHED, 0.95, c))
            if present:
                held.append(c)
        else:
            checks.append(check(c, Verdict.CLEAR if kind == "clear" else Verdict.UNKNOWN, 0.5, c))
    if fleet:
        checks.append(check(FLEET_CAUSE, Verdict.UNKNOWN, None, FLEET_CAUSE))
    t = target(pod, present, checks, held)
    if present is False:
        t = replace(t, detect=replace(t.detect, verdict=Verdict.CLEAR))
    return t


def whole_diagnosis(rng: random.Random, at: datetime, fleet: bool) -> Diagnosis:
    pods = [p for p in PODS if rng.random() < 0.8]
    d = replace(diagnosis(*(whole_target(rng, p, fleet) for p in pods)), evaluated_at=at)
    if fleet:
        verdict = rng.choice((Verdict.MATCHED, Verdict.CLEAR, Verdict.UNKNOWN))
        found = cause(FLEET_CAUSE, 3.0) if verdict is Verdict.MATCHED else None
        d = replace(d, fleet=(FleetResult(check(FLEET_CAUSE, verdict, 3.0, FLEET_CAUSE), found),))
    return d


def narrowed_form(d: Diagnosis) -> Diagnosis:
    """What diagnose_narrowed returns for the same readings: a clear target keeps its detect; where
    nothing is walked the detect pass is the diagnosis (no fleet result); no target at all: the
    whole walk."""
    if not d.targets:
        return d
    targets = tuple(replace(t, checks=(), root_causes=()) if t.symptom_present is False else t for t in d.targets)
    walked = any(t.symptom_present is not False for t in d.targets)
    return replace(d, targets=targets, fleet=d.fleet if walked else ())


def key(f: Finding) -> tuple[object, ...]:
    return f.fingerprint, f.phase, f.resolved_by, f.alerts, f.cause, dict(f.labels)


def test_a_narrowed_round_ends_as_the_whole_round_and_as_the_tracker_before(
    made: Callable[[str], tuple[World, World, World]],
) -> None:
    """40 sequences of 25 rounds and alert diagnoses (some complete, some pending for 2m) and alert
    resolutions; every step's changes and each store agree. What was reached is counted."""
    reached: Counter[str] = Counter()
    for seed in range(40):
        worlds = old, whole, narrowed = made(str(seed))
        rng = random.Random(seed)
        fleet = seed % 2 == 0
        minute = 0
        for step in range(25):
            minute += rng.choice((0, 1, 1, 3))
            now = AT + timedelta(minutes=minute)
            if rng.random() < 0.1:
                alert = rng.choice(ALERTS)
                outs = [sorted(map(key, w.tracker.resolve_alert(alert, now))) for w in worlds]
            else:
                d = whole_diagnosis(rng, now, fleet)
                alert_id = rng.choice((None, None, *ALERTS))
                complete: dict[str, str] | None = rng.choice((None, {}, {}))
                for_ = rng.choice((ZERO, ZERO, timedelta(minutes=2)))
                outs = []
                for w, shaped in ((old, d), (whole, d), (narrowed, narrowed_form(d))):
                    changed = w.tracker.record(
                        shaped, trigger=Trigger.ROUND, now=now, for_=for_, alert=alert_id, complete_scope=complete
                    )
                    outs.append(sorted(map(key, changed)))
                reached.update(
                    f"{f.state}:{f.resolved_by}:{'fleet' if f.labels.get('level') else 'target'}"
                    for f in whole.tracker.active()
                )
            assert outs[0] == outs[1] == outs[2], (seed, step)
            assert old.snapshot() == whole.snapshot() == narrowed.snapshot(), (seed, step)
            for found in outs[1]:
                reached[f"changed:{found[2]}"] += 1
    # Not vacuous: findings on targets and on the fleet, resolved each way.
    assert reached["firing:None:target"] > 0
    assert reached["firing:None:fleet"] > 0
    assert reached["pending:None:target"] > 0
    for by in (ResolvedBy.CLEAR, ResolvedBy.GONE, ResolvedBy.ALERT):
        assert reached[f"changed:{by}"] > 0, (by, reached)


def test_a_fleet_finding_ends_clear_where_the_symptom_is_clear_everywhere(
    made: Callable[[str], tuple[World, World, World]],
) -> None:
    """The one difference from the tracker before: the idle GPUs were a fleet-level finding; now
    they are answered per target (no fleet result) and the symptom is clear on every target. A
    complete round: clear, not gone; an incomplete one: clear too (the old one kept it)."""
    old, new, _ = made("fleet")
    fired = replace(
        diagnosis(target("vllm-0", True, [check(FLEET_CAUSE, Verdict.UNKNOWN, None, FLEET_CAUSE)])),
        fleet=(FleetResult(check(FLEET_CAUSE, Verdict.MATCHED, 3.0, FLEET_CAUSE), cause(FLEET_CAUSE, 3.0)),),
    )
    calm = diagnosis(clear_target("vllm-0"), clear_target("vllm-1"))
    later = AT + timedelta(minutes=1)
    ends: dict[str, list[tuple[object, ...]]] = {}
    for name, w in (("old", old), ("new", new)):
        w.tracker.record(fired, trigger=Trigger.ROUND, now=AT, for_=ZERO)
        assert [f.labels for f in w.tracker.active()] == [{"level": "fleet"}]
        incomplete = w.tracker.record(calm, trigger=Trigger.ROUND, now=later, for_=ZERO)
        ends[name] = [(f.labels, f.state, f.resolved_by) for f in incomplete]
    assert ends["old"] == []
    assert ends["new"] == [({"level": "fleet"}, State.RESOLVED, ResolvedBy.CLEAR)]
    gone = old.tracker.record(calm, trigger=Trigger.ROUND, now=later, for_=ZERO, complete_scope={})
    assert [f.resolved_by for f in gone] == [ResolvedBy.GONE]
