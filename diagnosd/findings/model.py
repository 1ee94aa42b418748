"""What a diagnosis found: immutable records carrying their evidence (engine output, not wire JSON)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from diagnosd.trees.model import Severity, Text


class Verdict(StrEnum):
    MATCHED = "matched"
    CLEAR = "clear"
    UNKNOWN = "unknown"
    MANUAL = "manual"
    # A child of a check that did not match: the seed only asks it on the "yes" branch.
    SKIPPED = "skipped"


class Reason(StrEnum):
    """Why a check is unknown: diagnosd could not look, which is never "no problem"."""

    NO_DATA = "no_data"
    METRIC_ABSENT = "metric_absent"
    QUERY_ERROR = "query_error"
    TIMEOUT = "timeout"
    ZERO_OVER_ZERO = "zero_over_zero"
    LOW_TRAFFIC = "low_traffic"
    NO_BASELINE = "no_baseline"
    BAD_VALUE = "bad_value"
    # The query gave +Inf or -Inf (a division by zero), not a measurement.
    INFINITE = "infinite"
    # The backend answered with warnings (a partial response): what it left out could clear nothing.
    PARTIAL = "partial"
    PARENT_NOT_MATCHED = "parent_not_matched"
    # The query's answer has no target labels: a fleet-wide fact, reported once on the Diagnosis.
    FLEET_LEVEL = "fleet_level"
    # Prometheus holds less history than the query's window reads (a TSDB started minutes ago):
    # rates over it are underestimates, not measurements.
    SHORT_HISTORY = "short_history"


class NodeKind(StrEnum):
    CHECK = "check"
    MANUAL = "manual"
    GROUP = "group"
    DETECT = "detect"


@dataclass(frozen=True)
class Evidence:
    """The numbers behind one verdict: enough to see why without re-running anything."""

    check: str
    query: str
    operator: str
    threshold: float
    value: float | None = None
    baseline: float | None = None
    baseline_at: datetime | None = None
    unit: str | None = None
    # Params no exporter publishes that this verdict relied on (name -> value used).
    assumed: Mapping[str, float | str] = field(default_factory=dict)
    context: Mapping[str, float | None] = field(default_factory=dict)
    # Warnings the backend returned with the answers behind this verdict (a partial response).
    warnings: tuple[str, ...] = ()
    # `all` / `any`: the verdict combines `conditions`, each with its own evidence; the fields
    # above then repeat the first condition's (the node's headline number).
    combine: str | None = None
    conditions: tuple[Evidence, ...] = ()
    # Of a condition inside all / any: its evidence line, its own verdict and why it is unknown.
    title: Text | None = None
    verdict: Verdict | None = None
    reason: Reason | None = None
    detail: str | None = None
    # Sustained (持续): `value` is the quantile held in `share` of the window `sustained_for`;
    # `current` is the value at the evaluation time.
    current: float | None = None
    sustained_for: str | None = None
    share: float | None = None

    def evolve(self, **changes: Any) -> Evidence:
        """A copy with `changes`: dataclasses.replace without its per-field re-construction.

        Judging a fleet copies an evidence for every condition of every all / any check of every
        target (42 000 copies for one tree at 1000 pods): replace() cost a third of that tree's
        judging. Every field is a plain value, so copying the instance's fields is the same copy.
        """
        unknown = changes.keys() - self.__dict__.keys()
        if unknown:
            raise TypeError(f"Evidence has no field {', '.join(sorted(unknown))}")
        copy = object.__new__(Evidence)
        copy.__dict__.update(self.__dict__, **changes)
        return copy

    @property
    def compared(self) -> float | None:
        """The number the threshold applies to: the value, its ratio or its delta to the baseline."""
        if self.value is None:
            return None
        if self.operator.startswith("ratio_"):
            return _ratio(self.value, self.baseline)
        if self.operator.startswith("delta_") and self.baseline is not None:
            return self.value - self.baseline
        return self.value


def _ratio(value: float, baseline: float | None) -> float | None:
    if baseline is None:
        return None
    if baseline == 0:
        return 1.0 if value == 0 else float("inf")
    return value / baseline


@dataclass(frozen=True, slots=True)
class CheckResult:
    id: str
    kind: NodeKind
    title: Text
    depth: int
    verdict: Verdict
    parent: str | None = None
    reason: Reason | None = None
    detail: str | None = None
    evidence: Evidence | None = None
    guidance: Text | None = None
    cause: str | None = None
    # Warnings of a partial answer this verdict was judged from (a clear verdict then becomes unknown).
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RootCause:
    cause: str
    title: Text
    severity: Severity
    remediation: tuple[Text, ...]
    check: str
    depth: int
    # How far past its threshold (1.0 = at the threshold): the last tie-break of the ranking.
    excess: float
    # The branch taken, outermost check first, this cause's own check last.
    evidence: tuple[Evidence, ...]
    caveat: Text | None = None
    # The matched causes that account for this one (empty for a root cause).
    explained_by: tuple[str, ...] = ()
    # The matched causes this one accounts for, each with its own evidence: shown under it.
    explains: tuple[RootCause, ...] = ()
    # Causes that would account for this one but could not be checked (their check unknown): this
    # one may be their consequence, so it is a possible cause, never a root cause.
    unsettled_by: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TargetDiagnosis:
    labels: Mapping[str, str]
    symptom_present: bool | None
    detect: CheckResult
    # Matched causes no other matched cause explains, most likely first (only where the symptom holds).
    root_causes: tuple[RootCause, ...]
    checks: tuple[CheckResult, ...]
    # Matched causes explained by another matched cause (each names it in `explained_by`).
    consequences: tuple[RootCause, ...] = ()
    # What would explain the symptom, ranked like root causes, never raised: every matched cause
    # where the symptom is unknown, and where it holds, the causes `unsettled_by` an unknown check.
    possible_causes: tuple[RootCause, ...] = ()

    def by_verdict(self, verdict: Verdict) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.verdict is verdict and c.kind is not NodeKind.GROUP)


@dataclass(frozen=True)
class FleetResult:
    """A check whose answer had no target labels: one fleet-wide fact, never a verdict on a target.

    Each target shows the check `unknown (fleet_level)`; the fact itself is judged once, here.
    """

    check: CheckResult
    # The check's conclusion where it matched: a fleet-level finding, never a target's root cause.
    finding: RootCause | None = None


@dataclass(frozen=True)
class Diagnosis:
    symptom: str
    title: Text
    evaluated_at: datetime
    scope: Mapping[str, str]
    target_labels: tuple[str, ...]
    targets: tuple[TargetDiagnosis, ...]
    queries: int
    # Scope-wide remarks: metrics absent on this Prometheus, defaults relied upon...
    notes: tuple[str, ...] = ()
    # Checks answered only by samples without target labels, judged once for the whole scope.
    fleet: tuple[FleetResult, ...] = ()
