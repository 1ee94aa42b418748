"""The Diagnosis as JSON-ready data: the contract of DESIGN.md shared by the CLI and the REST API."""

from __future__ import annotations

from typing import Any

# The wire's JSON of a cause and its evidence (the store keeps its own, findings/stored.py).
from diagnosd.findings.codec import encode_cause as encode_cause
from diagnosd.findings.codec import encode_evidence as encode_evidence
from diagnosd.findings.codec import number as number
from diagnosd.findings.codec import text as text
from diagnosd.findings.codec import timestamp as timestamp
from diagnosd.findings.model import CheckResult, Diagnosis, FleetResult, TargetDiagnosis


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
        # Checks answered only by samples without target labels: judged once, for the whole scope.
        "fleet": [fleet(f) for f in d.fleet],
    }


def fleet(f: FleetResult) -> dict[str, Any]:
    """A fleet-level result: the check's verdict and evidence, and its finding where it matched."""
    return {**check(f.check), "finding": encode_cause(f.finding) if f.finding else None}


def target(t: TargetDiagnosis) -> dict[str, Any]:
    return {
        "labels": dict(t.labels),
        "symptom_present": t.symptom_present,
        "detect": check(t.detect),
        # Only causes no other matched cause explains; each lists what it explains under `explains`.
        "root_causes": [encode_cause(c) for c in t.root_causes],
        # Matched causes explained by another (`explained_by`): shown under it, never root causes.
        "consequences": [encode_cause(c) for c in t.consequences],
        # Symptom unknown: what would explain it, symptom not established (never raised as findings).
        "possible_causes": [encode_cause(c) for c in t.possible_causes],
        "checks": [check(c) for c in t.checks],
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
        "evidence": encode_evidence(e) if e else None,
        "guidance": text(c.guidance) if c.guidance else None,
        "warnings": list(c.warnings),
    }
