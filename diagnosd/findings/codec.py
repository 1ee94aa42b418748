"""Findings, RootCause and Evidence to and from plain data: the store's rows keep the whole evidence.

Storage encoding only (the wire JSON is render/json.py). NaN and ±Inf travel as Prometheus
spells them, since JSON has neither; times are Unix seconds.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from diagnosd.findings.fingerprint import labels_key
from diagnosd.findings.lifecycle import Finding, Phase, ResolvedBy, State, Trigger
from diagnosd.findings.model import Evidence, Reason, RootCause, Verdict
from diagnosd.trees.model import Severity, Text


def encode_cause(c: RootCause) -> dict[str, Any]:
    """A root cause as JSON: the REST contract and the store share this one shape."""
    return {
        "cause": c.cause,
        "title": text(c.title),
        "severity": str(c.severity),
        "remediation": [text(r) for r in c.remediation],
        "caveat": text(c.caveat) if c.caveat else None,
        "check": c.check,
        "depth": c.depth,
        "excess": number(c.excess),
        "evidence": [encode_evidence(e) for e in c.evidence],
        "explained_by": list(c.explained_by),
        # The matched consequences this cause accounts for, each with its own evidence.
        "explains": [encode_cause(x) for x in c.explains],
    }


def decode_cause(data: dict[str, Any]) -> RootCause:
    return RootCause(
        cause=data["cause"],
        title=Text(**data["title"]),
        severity=Severity(data["severity"]),
        remediation=tuple(Text(**r) for r in data["remediation"]),
        check=data["check"],
        depth=int(data["depth"]),
        excess=_float(data["excess"]) or 0.0,
        evidence=tuple(decode_evidence(e) for e in data["evidence"]),
        caveat=Text(**data["caveat"]) if data.get("caveat") else None,
        # Rows stored before causal ranking have neither key.
        explained_by=tuple(data.get("explained_by") or ()),
        explains=tuple(decode_cause(x) for x in data.get("explains") or ()),
    )


def encode_evidence(e: Evidence) -> dict[str, Any]:
    """Evidence as JSON; `compared` (value, ratio or delta) is derived and ignored when decoding."""
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
        "assumed": {k: number(v) if isinstance(v, float) else v for k, v in e.assumed.items()},
        "context": {k: number(v) for k, v in e.context.items()},
        "warnings": list(e.warnings),
        # all / any: each condition's own evidence (the fields above repeat the first one's).
        "combine": e.combine,
        "conditions": [encode_evidence(c) for c in e.conditions],
        "title": text(e.title) if e.title else None,
        "verdict": str(e.verdict) if e.verdict else None,
        "reason": str(e.reason) if e.reason else None,
        "detail": e.detail,
        # Sustained: `value` held in `share` of `sustained_for`; `current` is the value now.
        "sustained": (
            {"for": e.sustained_for, "share": e.share, "current": number(e.current)} if e.sustained_for else None
        ),
    }


def decode_evidence(data: dict[str, Any]) -> Evidence:
    return Evidence(
        check=data["check"],
        query=data["query"],
        operator=data["operator"],
        threshold=_float(data["threshold"]) or 0.0,
        value=_float(data["value"]),
        baseline=_float(data["baseline"]),
        baseline_at=datetime.fromisoformat(data["baseline_at"]) if data.get("baseline_at") else None,
        unit=data.get("unit"),
        assumed=dict(data.get("assumed") or {}),
        context={k: _float(v) for k, v in (data.get("context") or {}).items()},
        warnings=tuple(data.get("warnings") or ()),
        combine=data.get("combine"),
        conditions=tuple(decode_evidence(c) for c in data.get("conditions") or ()),
        title=Text(**data["title"]) if data.get("title") else None,
        verdict=Verdict(data["verdict"]) if data.get("verdict") else None,
        reason=Reason(data["reason"]) if data.get("reason") else None,
        detail=data.get("detail"),
        current=_float((data.get("sustained") or {}).get("current")),
        sustained_for=(data.get("sustained") or {}).get("for"),
        share=(data.get("sustained") or {}).get("share"),
    )


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def text(t: Text) -> dict[str, str]:
    return {"en": t.en, "zh": t.zh}


def number(value: float | None) -> float | str | None:
    """JSON has no NaN or Infinity: those travel as Prometheus spells them."""
    if value is None:
        return None
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


def _float(value: float | str | None) -> float | None:
    return None if value is None else float(value)


def finding_row(f: Finding) -> tuple[Any, ...]:
    p = f.phase
    return (
        f.fingerprint,
        _ts(p.active_at),
        f.symptom,
        f.cause,
        str(f.severity),
        labels_key(f.labels),
        str(p.state),
        _ts(p.fired_at) if p.fired_at else None,
        _ts(p.resolved_at) if p.resolved_at else None,
        str(f.resolved_by) if f.resolved_by else None,
        _ts(f.last_seen),
        _ts(f.evaluated_at),
        str(f.trigger),
        json.dumps(list(f.alerts)),
        json.dumps(encode_cause(f.root_cause), ensure_ascii=False),
    )


def finding_from_row(row: tuple[Any, ...]) -> Finding:
    fp, active_at, symptom, cause, _severity, labels, state, fired, resolved, by, seen, at, trigger, alerts, rc = row
    return Finding(
        fingerprint=fp,
        symptom=symptom,
        cause=cause,
        labels=json.loads(labels),
        phase=Phase(State(state), _dt(active_at), _opt(fired), _opt(resolved)),
        last_seen=_dt(seen),
        trigger=Trigger(trigger),
        root_cause=decode_cause(json.loads(rc)),
        evaluated_at=_dt(at),
        alerts=tuple(json.loads(alerts)),
        resolved_by=ResolvedBy(by) if by else None,
    )


def _ts(moment: datetime) -> float:
    return moment.timestamp()


def _dt(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def _opt(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)
