"""A finding's lifecycle, pending → firing → resolved, as a small state machine, and the record it moves.

Like a Prometheus alert: a cause seen holding starts pending, fires once it has held for `for`,
resolves when it is seen clear. What could not be looked at (unknown) changes nothing: a finding
is never resolved because diagnosd was blind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from diagnosd.findings.model import RootCause
from diagnosd.trees.model import Severity


class State(StrEnum):
    PENDING = "pending"
    FIRING = "firing"
    RESOLVED = "resolved"


class Observed(StrEnum):
    """What one diagnosis says about one cause on one target."""

    HOLDS = "holds"
    CLEAR = "clear"
    UNKNOWN = "unknown"


class Trigger(StrEnum):
    ROUND = "round"
    ALERT = "alert"
    API = "api"
    CLI = "cli"  # `diagnosd diagnose`: looked at once, never recorded


class ResolvedBy(StrEnum):
    CLEAR = "clear"  # a diagnosis saw the cause no longer holding
    ALERT = "alert_resolved"  # the alert that reported it resolved
    GONE = "target_gone"  # a complete round no longer saw the target at all


@dataclass(frozen=True)
class Phase:
    state: State
    active_at: datetime
    fired_at: datetime | None = None
    resolved_at: datetime | None = None


def advance(phase: Phase | None, seen: Observed, now: datetime, for_: timedelta) -> Phase | None:
    """The next phase; None when there is nothing to remember (never seen, or pending that cleared)."""
    state = phase.state if phase is not None else None
    if seen is Observed.UNKNOWN:
        return phase
    if seen is Observed.HOLDS:
        if phase is None or state is State.RESOLVED:
            return _fire_if_due(Phase(State.PENDING, now), now, for_)
        if state is State.PENDING:
            return _fire_if_due(phase, now, for_)
        return phase
    if state is State.PENDING:
        return None
    if state is State.FIRING:
        assert phase is not None
        return replace(phase, state=State.RESOLVED, resolved_at=now)
    return phase


def _fire_if_due(phase: Phase, now: datetime, for_: timedelta) -> Phase:
    if now - phase.active_at >= for_:
        return replace(phase, state=State.FIRING, fired_at=now)
    return phase


@dataclass(frozen=True)
class Finding:
    """One episode of one cause on one target, with the evidence of the last diagnosis that saw it."""

    fingerprint: str
    symptom: str
    cause: str
    labels: Mapping[str, str]
    phase: Phase
    last_seen: datetime
    trigger: Trigger
    root_cause: RootCause
    evaluated_at: datetime
    # Fingerprints of the Alertmanager alerts whose diagnosis saw it; their resolution resolves it.
    alerts: tuple[str, ...] = ()
    resolved_by: ResolvedBy | None = None

    @property
    def state(self) -> State:
        return self.phase.state

    @property
    def severity(self) -> Severity:
        return self.root_cause.severity

    @property
    def active(self) -> bool:
        return self.phase.state is not State.RESOLVED
