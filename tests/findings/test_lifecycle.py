"""The finding lifecycle as a table: (phase before, what a diagnosis saw, for) -> phase after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diagnosd.findings.lifecycle import Observed, Phase, State, advance

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
NOW = T0 + timedelta(minutes=2)
HOLDS, CLEAR, UNKNOWN = Observed.HOLDS, Observed.CLEAR, Observed.UNKNOWN
PENDING = Phase(State.PENDING, T0)
FIRING = Phase(State.FIRING, T0, fired_at=T0 + timedelta(minutes=1))
RESOLVED = Phase(State.RESOLVED, T0, fired_at=T0, resolved_at=T0 + timedelta(minutes=1))

CASES = [
    # never seen
    ("new, holds, no for: fires at once", None, HOLDS, timedelta(0), Phase(State.FIRING, NOW, fired_at=NOW)),
    ("new, holds, with for: pending", None, HOLDS, timedelta(minutes=5), Phase(State.PENDING, NOW)),
    ("new, clear: nothing", None, CLEAR, timedelta(0), None),
    ("new, unknown: nothing", None, UNKNOWN, timedelta(0), None),
    # pending
    ("pending, holds, for not reached", PENDING, HOLDS, timedelta(minutes=5), PENDING),
    ("pending, holds, for reached exactly", PENDING, HOLDS, timedelta(minutes=2), Phase(State.FIRING, T0, NOW)),
    ("pending, holds, past for", PENDING, HOLDS, timedelta(minutes=1), Phase(State.FIRING, T0, NOW)),
    ("pending, clear: forgotten", PENDING, CLEAR, timedelta(minutes=5), None),
    ("pending, unknown: unchanged", PENDING, UNKNOWN, timedelta(minutes=5), PENDING),
    # firing
    ("firing, holds: unchanged", FIRING, HOLDS, timedelta(minutes=5), FIRING),
    ("firing, clear: resolved", FIRING, CLEAR, timedelta(0), Phase(State.RESOLVED, T0, FIRING.fired_at, NOW)),
    ("firing, unknown: still firing", FIRING, UNKNOWN, timedelta(0), FIRING),
    # resolved
    ("resolved, holds: a new episode", RESOLVED, HOLDS, timedelta(0), Phase(State.FIRING, NOW, fired_at=NOW)),
    ("resolved, holds, with for: new pending", RESOLVED, HOLDS, timedelta(minutes=1), Phase(State.PENDING, NOW)),
    ("resolved, clear: unchanged", RESOLVED, CLEAR, timedelta(0), RESOLVED),
    ("resolved, unknown: unchanged", RESOLVED, UNKNOWN, timedelta(0), RESOLVED),
]


@pytest.mark.parametrize(("name", "before", "seen", "hold", "after"), CASES, ids=[c[0] for c in CASES])
def test_advance(name: str, before: Phase | None, seen: Observed, hold: timedelta, after: Phase | None) -> None:
    assert advance(before, seen, NOW, hold) == after


def test_a_finding_is_never_resolved_by_blindness() -> None:
    phase: Phase | None = Phase(State.FIRING, T0, T0)
    for minute in range(60):
        phase = advance(phase, UNKNOWN, T0 + timedelta(minutes=minute), timedelta(0))
    assert phase == Phase(State.FIRING, T0, T0)


def test_pending_becomes_firing_after_its_for_over_successive_rounds() -> None:
    hold = timedelta(seconds=90)
    states = []
    phase: Phase | None = None
    for step in range(5):
        phase = advance(phase, HOLDS, T0 + timedelta(seconds=30 * step), hold)
        assert phase is not None
        states.append(phase.state)
    assert states == [State.PENDING, State.PENDING, State.PENDING, State.FIRING, State.FIRING]
    assert phase is not None
    assert phase.fired_at == T0 + timedelta(seconds=90)
