"""RootCause and Evidence as the wire's JSON: what render/json.py and the API's responses carry.

Not the stored shape (stored.py, versioned with each row): this one may change with the API.
NaN and ±Inf travel as Prometheus spells them, since JSON has neither; moments as RFC 3339.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from diagnosd.findings.model import Evidence, RootCause
from diagnosd.trees.model import Text


def encode_cause(c: RootCause) -> dict[str, Any]:
    """A root cause as JSON: the REST contract's shape, the CLI's --json too."""
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
        # Causes that would explain this one but could not be checked (a possible cause).
        "unsettled_by": list(c.unsettled_by),
    }


def encode_evidence(e: Evidence) -> dict[str, Any]:
    """Evidence as JSON; `compared` is the number the threshold applies to (value, ratio or delta)."""
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
