"""What a triage found across every symptom: the board's records (engine output, not wire JSON).

A symptom is on the board in exactly one of three places: present on some target (with the top
root cause of each), clear (every target it could see was ruled out), or not looked at (with why:
exporter or metric absent, no data, no baseline yet, query error...). Not looked at is never clear.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from diagnosd.findings.model import CheckResult, Evidence, RootCause
from diagnosd.trees.model import Severity, Text

# Severity rank for "worst first": a present symptom whose cause is unknown ranks below info.
SEVERITY_RANK: Mapping[Severity | None, int] = {
    Severity.CRITICAL: 3,
    Severity.WARNING: 2,
    Severity.INFO: 1,
    None: 0,
}

# Why a symptom (or some of its targets) could not be looked at; `Reason` values where one fits.
EXPORTER_ABSENT = "exporter_absent"
METRIC_ABSENT = "metric_absent"
NO_DATA = "no_data"
NO_BASELINE = "no_baseline"
QUERY_ERROR = "query_error"
TIMEOUT = "timeout"
UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class Hit:
    """One target where the symptom holds: its top root cause and the evidence line that shows it."""

    labels: Mapping[str, str]
    detect: CheckResult
    # None: no check that could run explains it (the full walk is in `Present.diagnosis`).
    cause: RootCause | None
    # The top cause's own check evidence, or the symptom's detect evidence when there is no cause.
    evidence: Evidence | None

    @property
    def severity(self) -> Severity | None:
        return self.cause.severity if self.cause else None


@dataclass(frozen=True)
class Unseen:
    """Targets (or a whole symptom) that could not be looked at, grouped by one reason."""

    reason: str
    detail: str
    # How many targets this concerns; 0 when no target could be seen at all.
    targets: int = 0


@dataclass(frozen=True)
class Present:
    symptom: str
    title: Text
    target_labels: tuple[str, ...]
    # Worst first: by the severity of the hit's top cause, then by labels.
    hits: tuple[Hit, ...]
    # Other targets of this symptom whose detect could not be judged (e.g. no baseline yet).
    unseen: tuple[Unseen, ...] = ()
    queries: int = 0
    # Targets this symptom's detect saw at all (present, clear or unknown).
    seen: int = 0

    @property
    def severity(self) -> Severity | None:
        return max((h.severity for h in self.hits), key=lambda s: SEVERITY_RANK[s], default=None)


@dataclass(frozen=True)
class Unknown:
    """A symptom that could not be looked at (for every target it could have had), and why."""

    symptom: str
    title: Text
    reasons: tuple[Unseen, ...]
    # Targets of this symptom that were ruled out (the others could not be judged).
    clear: int = 0


@dataclass(frozen=True)
class Clear:
    symptom: str
    title: Text
    targets: int


@dataclass(frozen=True)
class Board:
    evaluated_at: datetime
    scope: Mapping[str, str]
    # Worst first: by severity of the top cause, then by the number of targets, then by id.
    present: tuple[Present, ...]
    clear: tuple[Clear, ...]
    unknown: tuple[Unknown, ...]
    # Instant queries sent in all (detect pass and walks); independent of the number of targets.
    queries: int
    # Distinct targets (per target-label set) seen by any symptom's detect.
    targets: int

    @property
    def found(self) -> bool:
        return bool(self.present)

    @property
    def blind(self) -> bool:
        """Nothing at all could be looked at: no symptom was present or clear anywhere."""
        return not self.present and not self.clear
