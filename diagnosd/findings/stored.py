"""The stored shape of a finding: the row the findings store writes, its evidence as JSON, and the
format version written with each row. Apart from the wire JSON (codec.py, render/json.py) on
purpose: the API may change its shape, the rows already stored keep theirs.

A change to what a row holds is a new FORMAT with its own decoder; the decoders of every earlier
format stay, since old rows stay. NaN and ±Inf are stored as Prometheus spells them (JSON has
neither); moments are Unix seconds, `baseline_at` RFC 3339 in UTC.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from diagnosd.findings.fingerprint import labels_key
from diagnosd.findings.lifecycle import Finding, Phase, ResolvedBy, State, Trigger
from diagnosd.findings.model import Evidence, Reason, RootCause, Verdict
from diagnosd.storage.columns import moment, optional_moment, seconds
from diagnosd.trees.model import Severity, Text

FORMAT = 1
COLUMNS = (
    "fingerprint",
    "active_at",
    "symptom",
    "cause",
    "severity",
    "labels",
    "state",
    "fired_at",
    "resolved_at",
    "resolved_by",
    "last_seen",
    "evaluated_at",
    "trigger",
    "alerts",
    "root_cause",
    "format",
)


def finding_row(f: Finding) -> tuple[Any, ...]:
    """The row of COLUMNS, in FORMAT."""
    p = f.phase
    return (
        f.fingerprint,
        seconds(p.active_at),
        f.symptom,
        f.cause,
        str(f.severity),
        labels_key(f.labels),
        str(p.state),
        seconds(p.fired_at) if p.fired_at else None,
        seconds(p.resolved_at) if p.resolved_at else None,
        str(f.resolved_by) if f.resolved_by else None,
        seconds(f.last_seen),
        seconds(f.evaluated_at),
        str(f.trigger),
        json.dumps(list(f.alerts)),
        json.dumps(encode_cause(f.root_cause), ensure_ascii=False),
        FORMAT,
    )


def finding_from_row(row: tuple[Any, ...]) -> Finding:
    """A row of COLUMNS in any format this code knows; raises ValueError for one it does not."""
    version = row[-1]
    decode = _DECODERS.get(version)
    if decode is None:
        raise ValueError(f"finding {row[0]} is stored in format {version}; this diagnosd reads {sorted(_DECODERS)}")
    return decode(row[:-1])


def _finding_v1(row: tuple[Any, ...]) -> Finding:
    fp, active_at, symptom, cause, _severity, labels, state, fired, resolved, by, seen, at, trigger, alerts, rc = row
    return Finding(
        fingerprint=fp,
        symptom=symptom,
        cause=cause,
        labels=json.loads(labels),
        phase=Phase(State(state), moment(active_at), optional_moment(fired), optional_moment(resolved)),
        last_seen=moment(seen),
        trigger=Trigger(trigger),
        root_cause=decode_cause(json.loads(rc)),
        evaluated_at=moment(at),
        alerts=tuple(json.loads(alerts)),
        resolved_by=ResolvedBy(by) if by else None,
    )


_DECODERS: dict[int, Callable[[tuple[Any, ...]], Finding]] = {1: _finding_v1}


# Encoding, format 1 (the current one). `compared` is derived from the other fields: stored for
# a reader of the raw rows, ignored when decoding.


def encode_cause(c: RootCause) -> dict[str, Any]:
    return {
        "cause": c.cause,
        "title": _text(c.title),
        "severity": str(c.severity),
        "remediation": [_text(r) for r in c.remediation],
        "caveat": _text(c.caveat) if c.caveat else None,
        "check": c.check,
        "depth": c.depth,
        "excess": _number(c.excess),
        "evidence": [encode_evidence(e) for e in c.evidence],
        "explained_by": list(c.explained_by),
        "explains": [encode_cause(x) for x in c.explains],
    }


def encode_evidence(e: Evidence) -> dict[str, Any]:
    return {
        "check": e.check,
        "query": e.query,
        "operator": e.operator,
        "value": _number(e.value),
        "baseline": _number(e.baseline),
        "baseline_at": e.baseline_at.astimezone(UTC).isoformat().replace("+00:00", "Z") if e.baseline_at else None,
        "threshold": _number(e.threshold),
        "compared": _number(e.compared),
        "unit": e.unit,
        "assumed": {k: _number(v) if isinstance(v, float) else v for k, v in e.assumed.items()},
        "context": {k: _number(v) for k, v in e.context.items()},
        "warnings": list(e.warnings),
        "combine": e.combine,
        "conditions": [encode_evidence(c) for c in e.conditions],
        "title": _text(e.title) if e.title else None,
        "verdict": str(e.verdict) if e.verdict else None,
        "reason": str(e.reason) if e.reason else None,
        "detail": e.detail,
        "sustained": (
            {"for": e.sustained_for, "share": e.share, "current": _number(e.current)} if e.sustained_for else None
        ),
    }


def _text(t: Text) -> dict[str, str]:
    return {"en": t.en, "zh": t.zh}


def _number(value: float | None) -> float | str | None:
    if value is None:
        return None
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return value


# Decoding, format 1: when a format 2 comes, these stay (renamed for format 1) beside its own.
# Rows stored before causal ranking, partial-answer warnings, all/any or sustained checks lack
# those keys: they decode to the empty value.


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
        explained_by=tuple(data.get("explained_by") or ()),
        explains=tuple(decode_cause(x) for x in data.get("explains") or ()),
    )


def decode_evidence(data: dict[str, Any]) -> Evidence:
    sustained = data.get("sustained") or {}
    return Evidence(
        check=data["check"],
        query=data["query"],
        operator=data["operator"],
        threshold=_float(data["threshold"]) or 0.0,
        value=_float(data["value"]),
        baseline=_float(data["baseline"]),
        baseline_at=datetime.fromisoformat(data["baseline_at"]) if data.get("baseline_at") else None,
        unit=data.get("unit"),
        assumed={k: float(v) if v in _NON_FINITE else v for k, v in (data.get("assumed") or {}).items()},
        context={k: _float(v) for k, v in (data.get("context") or {}).items()},
        warnings=tuple(data.get("warnings") or ()),
        combine=data.get("combine"),
        conditions=tuple(decode_evidence(c) for c in data.get("conditions") or ()),
        title=Text(**data["title"]) if data.get("title") else None,
        verdict=Verdict(data["verdict"]) if data.get("verdict") else None,
        reason=Reason(data["reason"]) if data.get("reason") else None,
        detail=data.get("detail"),
        current=_float(sustained.get("current")),
        sustained_for=sustained.get("for"),
        share=sustained.get("share"),
    )


# An assumed param is a number or a word; a number JSON cannot hold comes back as a number.
_NON_FINITE = ("NaN", "+Inf", "-Inf")


def _float(value: float | str | None) -> float | None:
    return None if value is None else float(value)
