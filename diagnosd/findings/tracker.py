"""Applies diagnoses to findings: each cause on each target steps through the lifecycle, is written
to the store, and the active findings and latest target states stay in memory for export.

Synchronous on purpose: every update of memory and store happens without an await in between,
so rounds and alert workers sharing the event loop cannot interleave on one finding. Replicas on one
database cannot interleave either: each update reads the findings it changes from the store, in the
transaction that writes them, holding the findings turn (Store.writing); a batch (`record_many`,
the alerts of a coalesced storm) is one such transaction. What is kept in memory (what the
collector exports) is read again whole by `reload`, when this replica takes over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from diagnosd.findings.fingerprint import fingerprint, labels_key
from diagnosd.findings.lifecycle import Finding, Observed, ResolvedBy, State, Trigger, advance
from diagnosd.findings.model import Diagnosis
from diagnosd.findings.observe import Observation, fleet_labels, observe
from diagnosd.findings.store import Store
from diagnosd.findings.target import TargetState, target_state

Transition = Callable[[State], None]
# Asked inside the transaction that writes a diagnosis: whether it may be written (the alert state
# is still this replica's, marked done in the same transaction).
Claim = Callable[[], bool]


@dataclass(frozen=True)
class Recording:
    """One diagnosis for `Tracker.record_many`, with what `record` takes beside it."""

    diagnosis: Diagnosis
    alert: str | None = None
    complete_scope: Mapping[str, str] | None = None
    claim: Claim | None = None


class Tracker:
    def __init__(self, store: Store, on_transition: Transition | None = None) -> None:
        self._store = store
        self._on_transition = on_transition or (lambda state: None)
        self._active: dict[str, Finding] = {}
        self._states: dict[tuple[str, str], TargetState] = {}
        self.reload()

    def reload(self) -> None:
        """Read the active findings and the target states again, whoever wrote them (a replica
        taking over the rounds works from what the one before it left, not from its own start)."""
        active, states = self._store.active(), self._store.states()
        self._active = {f.fingerprint: f for f in active}
        self._states = {s.key: s for s in states}

    def active(self) -> list[Finding]:
        return sorted(self._active.values(), key=lambda f: (f.symptom, f.cause, labels_key(f.labels)))

    def states(self, now: datetime, ttl: timedelta) -> list[TargetState]:
        return [s for s in self._states.values() if now - s.evaluated_at <= ttl]

    def record(
        self,
        diagnosis: Diagnosis,
        *,
        trigger: Trigger,
        now: datetime,
        for_: timedelta,
        alert: str | None = None,
        complete_scope: Mapping[str, str] | None = None,
        claim: Claim | None = None,
    ) -> list[Finding]:
        """Apply one diagnosis; returns the findings that changed.

        `complete_scope`: the diagnosis covered every target of this scope without a query error,
        so an active finding on a target it no longer saw is resolved as gone. `claim`: asked
        first, in the same transaction; when it says no, nothing is written (returns []).
        """
        [changed] = self.record_many(
            [Recording(diagnosis, alert, complete_scope, claim)], trigger=trigger, now=now, for_=for_
        )
        return changed

    def record_many(
        self, recordings: Sequence[Recording], *, trigger: Trigger, now: datetime, for_: timedelta
    ) -> list[list[Finding]]:
        """Apply many diagnoses in one transaction, in order, each after its own claim: what
        `record` for each in sequence does, committed once. Returns each one's changed findings.

        Nothing is kept in memory unless the whole transaction commits.
        """
        kept = dict(self._active), dict(self._states)
        try:
            with self._store.writing():
                # The turn is held to the end: no replica writes findings meanwhile, and what this
                # one writes is mirrored in memory, so one read of each symptom's findings serves all.
                refreshed: set[str] = set()
                writes = _Writes()
                changed = [self._record_within(r, trigger, now, for_, refreshed, writes) for r in recordings]
                writes.flush(self._store)
                return changed
        except BaseException:
            self._active, self._states = kept
            raise

    def _record_within(
        self,
        recording: Recording,
        trigger: Trigger,
        now: datetime,
        for_: timedelta,
        refreshed: set[str],
        writes: _Writes,
    ) -> list[Finding]:
        diagnosis = recording.diagnosis
        if recording.claim is not None and not recording.claim():
            return []
        if diagnosis.symptom not in refreshed:
            self._refresh(diagnosis.symptom)
            refreshed.add(diagnosis.symptom)
        changed, forgotten, states, removed = self._changes(
            diagnosis, trigger, now, for_, recording.alert, recording.complete_scope
        )
        writes.add(changed.values(), forgotten, states, removed)
        self._apply(changed, forgotten)
        for key in removed:
            self._states.pop(key, None)
        self._states.update((s.key, s) for s in states)
        return list(changed.values())

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
        # A cause that holds nowhere in this symptom ends nothing where it is clear: its
        # observations need no fingerprint (most of a healthy fleet's, four for each target).
        holding = {f.cause for f in self._active.values() if f.symptom == diagnosis.symptom}
        for o in observe(diagnosis):
            if o.seen is Observed.HOLDS or (o.seen is Observed.CLEAR and o.cause in holding):
                self._step(o, now, for_, trigger, alert, diagnosis.evaluated_at, changed, forgotten)
        keys = [labels_key(t.labels) for t in diagnosis.targets]
        seen = set(keys)
        if diagnosis.fleet:
            seen.add(labels_key(fleet_labels(diagnosis)))
        if holding:
            seen |= self._clear_where_absent(diagnosis, keys, now, changed, forgotten)
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

    def _clear_where_absent(
        self,
        diagnosis: Diagnosis,
        keys: Sequence[str],
        now: datetime,
        changed: dict[str, Finding],
        forgotten: list[Finding],
    ) -> set[str]:
        """Where the symptom is not there no cause holds: every finding still active on a target
        where it is clear ends, whatever checks the diagnosis walked there (a narrowed round walks
        none), and a fleet-level one ends where it is clear on every target. `keys`: each target's
        labels_key, in order. Returns the keys of the labels it looked at, the fleet's included
        (seen: not gone)."""
        absent = {k for k, t in zip(keys, diagnosis.targets, strict=True) if t.symptom_present is False}
        if absent and len(absent) == len(diagnosis.targets):
            absent.add(labels_key(fleet_labels(diagnosis)))
        handled = changed.keys() | {f.fingerprint for f in forgotten}
        for f in list(self._active.values()):
            if f.symptom == diagnosis.symptom and f.fingerprint not in handled and labels_key(f.labels) in absent:
                self._resolve(f, now, ResolvedBy.CLEAR, changed, forgotten)
        return absent

    def _refresh(self, symptom: str | None) -> None:
        """The active findings (of one symptom, or all) as the store holds them now: another
        replica may have written some since this one last looked."""
        kept = {fp: f for fp, f in self._active.items() if symptom is not None and f.symptom != symptom}
        self._active = kept | {f.fingerprint: f for f in self._store.active(symptom)}

    def resolve_alert(self, alert: str, now: datetime) -> list[Finding]:
        """The alert resolved: the findings only it reported resolve; others forget it."""
        changed: dict[str, Finding] = {}
        forgotten: list[Finding] = []
        with self._store.writing():
            self._refresh(None)
            for f in list(self._active.values()):
                if alert not in f.alerts:
                    continue
                rest = tuple(a for a in f.alerts if a != alert)
                if rest:
                    changed[f.fingerprint] = replace(f, alerts=rest)
                else:
                    self._resolve(replace(f, alerts=rest), now, ResolvedBy.ALERT, changed, forgotten)
            self._store.write(changed.values(), [(f.fingerprint, f.phase.active_at) for f in forgotten])
        self._apply(changed, forgotten)
        return list(changed.values())

    def expire(self, now: datetime, ttl: timedelta) -> int:
        """Forget target states not refreshed within `ttl` (their targets left or nothing looks any more)."""
        gone = self._store.expire_states(now - ttl)
        for key in [key for key, s in self._states.items() if now - s.evaluated_at > ttl]:
            del self._states[key]
        return gone

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
        fp = fingerprint(o.symptom, o.cause, o.labels)
        current = changed.get(fp) or self._active.get(fp)
        if o.seen is Observed.CLEAR:
            if current is not None:
                self._resolve(current, now, ResolvedBy.CLEAR, changed, forgotten)
            return
        assert o.root_cause is not None
        phase = advance(current.phase if current else None, Observed.HOLDS, now, for_)
        assert phase is not None
        if current is None or phase.active_at != current.phase.active_at:
            current = None
        alerts = current.alerts if current else ()
        if alert and alert not in alerts:
            alerts = (*alerts, alert)
        found = Finding(
            fingerprint=fp,
            symptom=o.symptom,
            cause=o.cause,
            labels=dict(o.labels),
            phase=phase,
            last_seen=now,
            trigger=trigger,
            root_cause=o.root_cause,
            evaluated_at=evaluated_at,
            alerts=alerts,
        )
        if current is None or current.state is not phase.state:
            self._on_transition(phase.state)
        changed[fp] = found

    def _resolve(
        self, f: Finding, now: datetime, by: ResolvedBy, changed: dict[str, Finding], forgotten: list[Finding]
    ) -> None:
        phase = advance(f.phase, Observed.CLEAR, now, timedelta(0))
        if phase is None:
            changed.pop(f.fingerprint, None)
            forgotten.append(f)
            return
        if phase != f.phase:
            self._on_transition(phase.state)
            changed[f.fingerprint] = replace(f, phase=phase, resolved_by=by)

    def _apply(self, changed: Mapping[str, Finding], forgotten: list[Finding]) -> None:
        for f in forgotten:
            self._active.pop(f.fingerprint, None)
        for fp, f in changed.items():
            if f.active:
                self._active[fp] = f
            else:
                self._active.pop(fp, None)


@dataclass
class _Writes:
    """What a batch writes, gathered into a few statements for the store: the last write of each
    row wins (an upsert or a delete), as when each diagnosis is written in turn."""

    findings: dict[tuple[str, datetime], Finding | None] = field(default_factory=dict)
    states: dict[tuple[str, str], TargetState | None] = field(default_factory=dict)

    def add(
        self,
        changed: Iterable[Finding],
        forgotten: Iterable[Finding],
        states: Iterable[TargetState],
        removed: Iterable[tuple[str, str]],
    ) -> None:
        # In the order Store.write and write_states apply them: upserts, then deletes.
        self.findings.update(((f.fingerprint, f.phase.active_at), f) for f in changed)
        self.findings.update(((f.fingerprint, f.phase.active_at), None) for f in forgotten)
        self.states.update((s.key, s) for s in states)
        self.states.update((key, None) for key in removed)

    def flush(self, store: Store) -> None:
        store.write(
            [f for f in self.findings.values() if f is not None],
            [key for key, f in self.findings.items() if f is None],
        )
        store.write_states(
            [s for s in self.states.values() if s is not None], [key for key, s in self.states.items() if s is None]
        )


def _within(f: Finding, scope: Mapping[str, str]) -> bool:
    return _within_labels(f.labels, scope)


def _within_labels(labels: Mapping[str, str], scope: Mapping[str, str]) -> bool:
    """Inside the scope for sure: every scope label is a target label with the same value."""
    return all(labels.get(name) == value for name, value in scope.items())
