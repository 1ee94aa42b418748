"""What one diagnosis says about each cause on each target: holds, clear, or unknown.

A cause holds when it is among the target's root causes; it is clear when its check ran and did
not match (or the symptom is not there at all); anything diagnosd could not look at is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from diagnosd.findings.lifecycle import Observed
from diagnosd.findings.model import CheckResult, Diagnosis, NodeKind, RootCause, TargetDiagnosis, Verdict


@dataclass(frozen=True)
class Observation:
    symptom: str
    cause: str
    labels: Mapping[str, str]
    seen: Observed
    # The ranked root cause with its evidence, when it holds.
    root_cause: RootCause | None = None


def observe(diagnosis: Diagnosis) -> list[Observation]:
    return [o for t in diagnosis.targets for o in observe_target(diagnosis.symptom, t)]


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
