"""What one diagnosis says about each cause on each target: holds, clear, or unknown.

A cause holds when it is among the target's root causes; it is clear when its check ran and did
not match (or the symptom is not there at all); anything diagnosd could not look at is unknown.

A fleet-level result (a check answered only by samples without target labels) is one finding for
the diagnosis' scope, labelled with the scope and `level="fleet"`: it holds only where the
symptom is present on some target of that scope (no root cause without a symptom).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from diagnosd.findings.lifecycle import Observed
from diagnosd.findings.model import CheckResult, Diagnosis, NodeKind, RootCause, TargetDiagnosis, Verdict

# The label (and value) that marks a fleet-level finding; its other labels are the scope's.
LEVEL_LABEL, FLEET = "level", "fleet"


@dataclass(frozen=True)
class Observation:
    symptom: str
    cause: str
    labels: Mapping[str, str]
    seen: Observed
    # The ranked root cause with its evidence, when it holds.
    root_cause: RootCause | None = None


def observe(diagnosis: Diagnosis) -> list[Observation]:
    return [o for t in diagnosis.targets for o in observe_target(diagnosis.symptom, t)] + observe_fleet(diagnosis)


def fleet_labels(diagnosis: Diagnosis) -> dict[str, str]:
    return {**diagnosis.scope, LEVEL_LABEL: FLEET}


def observe_fleet(diagnosis: Diagnosis) -> list[Observation]:
    """One observation per cause of the fleet-level results, for the whole scope."""
    present = [t.symptom_present for t in diagnosis.targets]
    symptom = True in present
    absent = bool(present) and all(p is False for p in present)
    labels = fleet_labels(diagnosis)
    seen: dict[str, Observation] = {}
    for result in diagnosis.fleet:
        cause = result.check.cause
        if cause is None:
            continue  # the detect itself, judged fleet-wide: a symptom, not a cause
        if result.finding is not None and symptom:
            observation = Observation(diagnosis.symptom, cause, labels, Observed.HOLDS, result.finding)
        elif absent or result.check.verdict in (Verdict.CLEAR, Verdict.SKIPPED):
            observation = Observation(diagnosis.symptom, cause, labels, Observed.CLEAR)
        else:
            observation = Observation(diagnosis.symptom, cause, labels, Observed.UNKNOWN)
        before = seen.get(cause)
        if before is None or _rank(observation.seen) > _rank(before.seen):
            seen[cause] = observation
    return list(seen.values())


def _rank(seen: Observed) -> int:
    """Two checks of one cause: holding wins over unknown, unknown over clear."""
    return {Observed.HOLDS: 2, Observed.UNKNOWN: 1}.get(seen, 0)


def observe_target(symptom: str, t: TargetDiagnosis) -> list[Observation]:
    held: dict[str, RootCause] = {}
    for root in t.root_causes:
        held.setdefault(root.cause, root)
    checks = {c.id: c for c in t.checks}
    by_cause: dict[str, list[CheckResult]] = {}
    for check in t.checks:
        if check.kind is NodeKind.CHECK and check.cause is not None:
            by_cause.setdefault(check.cause, []).append(check)
    out: list[Observation] = []
    for cause, nodes in by_cause.items():
        if cause in held:
            out.append(Observation(symptom, cause, t.labels, Observed.HOLDS, held[cause]))
        elif t.symptom_present is False:
            out.append(Observation(symptom, cause, t.labels, Observed.CLEAR))
        else:
            seen = [_seen(node, checks) for node in nodes]
            verdict = Observed.UNKNOWN if Observed.UNKNOWN in seen else Observed.CLEAR
            out.append(Observation(symptom, cause, t.labels, verdict))
    return out


def _seen(node: CheckResult, checks: Mapping[str, CheckResult]) -> Observed:
    """A check's say on its cause; a skipped check answers as the check above it that ran."""
    current: CheckResult | None = node
    while current is not None and current.verdict is Verdict.SKIPPED:
        current = checks.get(current.parent) if current.parent else None
        while current is not None and current.kind is not NodeKind.CHECK:
            current = checks.get(current.parent) if current.parent else None
    if current is None or current.verdict is Verdict.UNKNOWN:
        return Observed.UNKNOWN
    if current.verdict is Verdict.CLEAR:
        return Observed.CLEAR
    # Matched yet not a root cause: a possible cause (symptom unknown) or a consequence another cause explains.
    return Observed.UNKNOWN
