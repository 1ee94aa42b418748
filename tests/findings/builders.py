"""Diagnosis records built by hand for the findings units (the engine is tested on its own)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from diagnosd.findings.model import (
    CheckResult,
    Diagnosis,
    Evidence,
    FleetResult,
    NodeKind,
    RootCause,
    TargetDiagnosis,
    Verdict,
)
from diagnosd.trees.model import Severity, Text

AT = datetime(2026, 1, 2, 1, 0, tzinfo=UTC)
T = Text(en="t", zh="t")


def evidence(check: str, value: float | None) -> Evidence:
    return Evidence(check=check, query=f"max({check})", operator="above", threshold=0.9, value=value)


def check(
    id: str, verdict: Verdict, value: float | None = None, cause: str | None = None, parent: str | None = None
) -> CheckResult:
    kind = NodeKind.MANUAL if verdict is Verdict.MANUAL else NodeKind.CHECK
    return CheckResult(
        id=id,
        kind=kind,
        title=T,
        depth=2 if parent else 1,
        verdict=verdict,
        parent=parent,
        evidence=evidence(id, value) if value is not None else None,
        cause=cause,
    )


def cause(name: str, value: float = 0.95) -> RootCause:
    return RootCause(
        cause=name,
        title=Text(en=f"{name} title", zh="原因"),
        severity=Severity.WARNING,
        remediation=(Text(en="fix it", zh="修"),),
        check=name,
        depth=1,
        excess=value / 0.9,
        evidence=(evidence(name, value),),
    )


def target(
    pod: str, present: bool | None, checks: Sequence[CheckResult], causes: Sequence[str] = ()
) -> TargetDiagnosis:
    detect = CheckResult(
        id="detect", kind=NodeKind.DETECT, title=T, depth=0, verdict=Verdict.MATCHED, evidence=evidence("detect", 20.0)
    )
    return TargetDiagnosis(
        labels={"namespace": "prod", "pod": pod},
        symptom_present=present,
        detect=detect,
        root_causes=tuple(cause(c) for c in causes),
        checks=tuple(checks),
    )


def diagnosis(
    *targets: TargetDiagnosis, symptom: str = "queue_backlog", scope: Mapping[str, str] | None = None
) -> Diagnosis:
    return Diagnosis(
        symptom=symptom,
        title=T,
        evaluated_at=AT,
        scope=dict(scope or {}),
        target_labels=("namespace", "pod"),
        targets=tuple(targets),
        queries=3,
    )


def holding(pod: str = "vllm-0") -> TargetDiagnosis:
    """kv_pool_full holds on `pod`."""
    return target(pod, True, [check("kv_pool_full", Verdict.MATCHED, 0.95, "kv_pool_full")], ["kv_pool_full"])


def clear(pod: str = "vllm-0") -> TargetDiagnosis:
    return target(pod, True, [check("kv_pool_full", Verdict.CLEAR, 0.5, "kv_pool_full")])


def unknown(pod: str = "vllm-0") -> TargetDiagnosis:
    return target(pod, None, [check("kv_pool_full", Verdict.UNKNOWN, None, "kv_pool_full")])


def fleetwide(present: bool | None, verdict: Verdict, scope: Mapping[str, str] | None = None) -> Diagnosis:
    """idle_gpus judged once for the scope (its answer had no target labels); one target's symptom."""
    result = FleetResult(
        check("idle_gpus", verdict, 3.0 if verdict is not Verdict.UNKNOWN else None, "idle_gpus"),
        cause("idle_gpus", 3.0) if verdict is Verdict.MATCHED else None,
    )
    fleet_check = check("idle_gpus", Verdict.UNKNOWN, None, "idle_gpus")
    return replace(diagnosis(target("vllm-0", present, [fleet_check]), scope=scope), fleet=(result,))
