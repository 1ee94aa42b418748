"""What the last diagnosis saw on one target: symptom present or not, and the value of each check.

Kept per (symptom, target) for the exported diagnosd_symptom_active and diagnosd_check_value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from diagnosd.findings.fingerprint import labels_key
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import NodeKind, TargetDiagnosis

DETECT = "detect"


@dataclass(frozen=True)
class TargetState:
    symptom: str
    labels: Mapping[str, str]
    present: bool | None
    # check id -> the value it saw ("detect" for the symptom's own query); checks without a value omitted.
    values: Mapping[str, float]
    evaluated_at: datetime
    trigger: Trigger

    @property
    def key(self) -> tuple[str, str]:
        return self.symptom, labels_key(self.labels)


def target_state(symptom: str, t: TargetDiagnosis, at: datetime, trigger: Trigger) -> TargetState:
    values: dict[str, float] = {}
    for check in (t.detect, *t.checks):
        if check.kind in (NodeKind.CHECK, NodeKind.DETECT) and check.evidence and check.evidence.value is not None:
            values[DETECT if check.kind is NodeKind.DETECT else check.id] = check.evidence.value
    return TargetState(symptom, dict(t.labels), t.symptom_present, values, at, trigger)
