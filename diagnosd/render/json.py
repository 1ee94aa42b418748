"""The Diagnosis as JSON-ready data: the contract of DESIGN.md shared by the CLI and the REST API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from diagnosd.findings.codec import number as number  # re-exported: the wire encoding of values
from diagnosd.findings.codec import text as text
from diagnosd.findings.model import CheckResult, Diagnosis, Evidence, RootCause, TargetDiagnosis


def diagnosis(d: Diagnosis) -> dict[str, Any]:
    return {
        "symptom": d.symptom,
        "title": text(d.title),
        "evaluated_at": timestamp(d.evaluated_at),
        "scope": dict(d.scope),
        "target_labels": list(d.target_labels),
        "queries": d.queries,
        "notes": list(d.notes),
        "targets": [target(t) for t in d.targets],
    }


def target(t: TargetDiagnosis) -> dict[str, Any]:
    return {
        "labels": dict(t.labels),
        "symptom_present": t.symptom_present,
        "detect": check(t.detect),
        "root_causes": [root_cause(c) for c in t.root_causes],
        "checks": [check(c) for c in t.checks],
    }


def root_cause(c: RootCause) -> dict[str, Any]:
    return {
        "cause": c.cause,
        "title": text(c.title),
        "severity": str(c.severity),
        "remediation": [text(r) for r in c.remediation],
        "caveat": text(c.caveat) if c.caveat else None,
        "check": c.check,
        "depth": c.depth,
        "excess": number(c.excess),
        "evidence": [evidence(e) for e in c.evidence],
    }


def check(c: CheckResult) -> dict[str, Any]:
    e = c.evidence
    return {
        "id": c.id,
        "kind": str(c.kind),
        "title": text(c.title),
        "depth": c.depth,
        "parent": c.parent,
        "verdict": str(c.verdict),
        "reason": str(c.reason) if c.reason else None,
        "detail": c.detail,
        "cause": c.cause,
        "value": number(e.value) if e else None,
        "baseline": number(e.baseline) if e else None,
        "threshold": number(e.threshold) if e else None,
        "evidence": evidence(e) if e else None,
        "guidance": text(c.guidance) if c.guidance else None,
    }


def evidence(e: Evidence) -> dict[str, Any]:
    return {
        "check": e.check,
        "query": e.query,
        "operator": e.operator,
        "value": number(e.value),
        "baseline": number(e.baseline),
        "baseline_at": timestamp(e.baseline_at) if e.baseline_at else None,
        "threshold": number(e.threshold),
        "compared": number(e.compared),
        "unit": e.unit,
        "assumed": dict(e.assumed),
        "context": {k: number(v) for k, v in e.context.items()},
    }


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
