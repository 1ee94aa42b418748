"""The REST API's wire models, apart from the engine's types and the trees' YAML shape.

The diagnosis body is render/json.py's contract (shared with the CLI), described here for
OpenAPI; findings and symptoms are mapped from their domain records by the functions below.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from diagnosd.daemon.alertmanager import payload as alerts
from diagnosd.findings.lifecycle import Finding
from diagnosd.render import json as render_json
from diagnosd.trees.model import CheckNode, Conditional, GroupNode, ManualNode, Tree, walk

# JSON has no NaN or Infinity: render/json.py sends them as the strings "NaN", "+Inf", "-Inf".
Number = float | str | None


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextOut(Wire):
    en: str
    zh: str


class SustainedOut(Wire):
    for_: str = Field(alias="for")
    share: float
    current: Number


class EvidenceOut(Wire):
    check: str
    query: str
    operator: str
    value: Number
    baseline: Number
    baseline_at: str | None
    threshold: Number
    compared: Number
    unit: str | None
    assumed: dict[str, float | str]
    context: dict[str, Number]
    # The backend's warnings for the answers behind it (a partial response).
    warnings: list[str] = []
    # all / any: each condition's own evidence (the fields above repeat the first one's).
    combine: str | None = None
    conditions: list[EvidenceOut] = []
    # Of a condition: its evidence line, verdict and why it is unknown.
    title: TextOut | None = None
    verdict: str | None = None
    reason: str | None = None
    detail: str | None = None
    # Sustained (持续): `value` held in `share` of `for`; `current` is the value now.
    sustained: SustainedOut | None = None


class CheckOut(Wire):
    id: str
    kind: str
    title: TextOut
    depth: int
    parent: str | None
    verdict: str
    reason: str | None
    detail: str | None
    cause: str | None
    value: Number
    baseline: Number
    threshold: Number
    evidence: EvidenceOut | None
    guidance: TextOut | None
    warnings: list[str] = []


class RootCauseOut(Wire):
    cause: str
    title: TextOut
    severity: str
    remediation: list[TextOut]
    caveat: TextOut | None
    check: str
    depth: int
    excess: Number
    evidence: list[EvidenceOut]
    # The matched causes that explain this one (a consequence); empty for a root cause.
    explained_by: list[str] = []
    # The matched consequences this cause explains, each with its evidence.
    explains: list[RootCauseOut] = []
    # Causes that would explain this one but could not be checked: it is a possible cause only.
    unsettled_by: list[str] = []


RootCauseOut.model_rebuild()


class FleetOut(CheckOut):
    """A fleet-level result: the check's verdict and evidence; `finding` where it matched."""

    finding: RootCauseOut | None = None


class TargetOut(Wire):
    labels: dict[str, str]
    symptom_present: bool | None
    detect: CheckOut
    root_causes: list[RootCauseOut]
    # Matched causes explained by a root cause (shown under it, never a root cause themselves).
    consequences: list[RootCauseOut] = []
    # Never raised: matched branches that would explain a symptom that is unknown, and where it
    # holds, matched causes that an unchecked cause would explain (`unsettled_by`).
    possible_causes: list[RootCauseOut] = []
    checks: list[CheckOut]


class DiagnosisOut(Wire):
    symptom: str
    title: TextOut
    evaluated_at: str
    scope: dict[str, str]
    target_labels: list[str]
    queries: int
    notes: list[str]
    targets: list[TargetOut]
    # Checks answered only by samples without target labels: judged once, for the whole scope.
    fleet: list[FleetOut] = []


class DetectOut(Wire):
    title: TextOut
    query: str
    unit: str | None


class SymptomOut(Wire):
    id: str
    title: TextOut
    target: list[str]
    causes: list[str]
    detect: DetectOut


class ParamOut(Wire):
    name: str
    default: float | str
    value: float | str
    doc: str
    assumed: bool
    unit: str | None


class NodeOut(Wire):
    id: str
    kind: str
    depth: int
    title: TextOut
    cause: str | None
    query: str | None
    guidance: TextOut | None


class SymptomDetailOut(SymptomOut):
    params: list[ParamOut]
    nodes: list[NodeOut]


class EpisodeOut(Wire):
    state: str
    active_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    resolved_by: str | None


class FindingOut(Wire):
    id: str
    symptom: str
    cause: str
    severity: str
    labels: dict[str, str]
    state: str
    active_at: datetime
    fired_at: datetime | None
    resolved_at: datetime | None
    resolved_by: str | None
    last_seen: datetime
    evaluated_at: datetime
    trigger: str
    alerts: list[str]
    root_cause: RootCauseOut


class FindingDetailOut(FindingOut):
    # Earlier episodes of the same finding (same fingerprint), the latest first.
    episodes: list[EpisodeOut]


class FindingListOut(Wire):
    findings: list[FindingOut]
    count: int
    # True when `limit` cut the list.
    truncated: bool
    since: datetime | None
    until: datetime | None


class SkippedOut(Wire):
    fingerprint: str
    alertname: str
    reason: str
    detail: str


# The webhook body is Alertmanager's payload as the daemon reads it (one home: daemon/alertmanager).
Payload = alerts.Payload


class ReceiptOut(Wire):
    queued: int
    duplicates: int
    skipped: list[SkippedOut]
    truncated_alerts: int


class HealthOut(Wire):
    status: str


class CircuitOut(Wire):
    """The circuit around Prometheus (sources/circuit.py)."""

    state: str = Field(description="closed, half_open (one probe asks) or open (nothing is asked)")
    failures: int = Field(description="consecutive failed calls to Prometheus")
    openings: int = Field(description="consecutive openings without an answered probe between")
    next_probe_in_seconds: float | None = Field(description="open: when a call may probe again")
    last_error: str | None = Field(description="what the last failed call said")


class ProbeOut(Wire):
    ok: bool
    detail: str
    circuit: CircuitOut | None = None


class ReadyOut(Wire):
    ready: bool
    checks: dict[str, ProbeOut]


class ErrorOut(BaseModel):
    error: str
    message: str


# What a router behind require_api may answer besides its own responses.
UNAUTHORIZED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorOut, "description": "no valid bearer token, where auth.api_tokens are set"}
}


def symptom_out(tree: Tree) -> SymptomOut:
    return SymptomOut.model_validate(_symptom(tree))


def symptom_detail(tree: Tree, overrides: dict[str, float | str]) -> SymptomDetailOut:
    params = [
        ParamOut(
            name=name,
            default=p.default,
            value=overrides.get(name, p.default),
            doc=p.doc,
            assumed=p.assumed,
            unit=p.unit,
        )
        for name, p in tree.params.items()
    ]
    nodes = [_node(node, depth) for node, depth in walk(list(tree.nodes))]
    return SymptomDetailOut.model_validate({**_symptom(tree), "params": params, "nodes": nodes})


def _symptom(tree: Tree) -> dict[str, Any]:
    causes = [n.conclusion.cause for n, _ in walk(list(tree.nodes)) if not isinstance(n, GroupNode) and n.conclusion]
    return {
        "id": tree.id,
        "title": render_json.text(tree.title),
        "target": list(tree.target),
        "causes": list(dict.fromkeys(causes)),
        "detect": {
            "title": render_json.text(tree.detect.title),
            "query": _query(tree.detect),
            "unit": tree.detect.unit,
        },
    }


def _query(item: Conditional) -> str:
    """A comparison's query; all / any as `(a) and (b)` / `(a) or (b)` of their conditions' queries."""
    if item.combine is None:
        return item.comparison()[0]
    joiner = " and " if item.combine == "all" else " or "
    return joiner.join(f"({_query(c)})" for c in item.conditions)


def _node(node: CheckNode | ManualNode | GroupNode, depth: int) -> NodeOut:
    conclusion = None if isinstance(node, GroupNode) else node.conclusion
    return NodeOut(
        id=node.id,
        kind="check" if isinstance(node, CheckNode) else "manual" if isinstance(node, ManualNode) else "group",
        depth=depth,
        title=TextOut(**render_json.text(node.title)),
        cause=conclusion.cause if conclusion else None,
        query=_query(node) if isinstance(node, CheckNode) else None,
        guidance=TextOut(**render_json.text(node.manual)) if isinstance(node, ManualNode) else None,
    )


def finding_out(f: Finding) -> FindingOut:
    return FindingOut.model_validate(_finding(f))


def finding_detail(latest: Finding, earlier: list[Finding]) -> FindingDetailOut:
    return FindingDetailOut.model_validate({**_finding(latest), "episodes": [_episode(f) for f in earlier]})


def _finding(f: Finding) -> dict[str, Any]:
    return {
        "id": f.fingerprint,
        "symptom": f.symptom,
        "cause": f.cause,
        "severity": str(f.severity),
        "labels": dict(f.labels),
        **_episode(f),
        "last_seen": f.last_seen,
        "evaluated_at": f.evaluated_at,
        "trigger": str(f.trigger),
        "alerts": list(f.alerts),
        "root_cause": render_json.encode_cause(f.root_cause),
    }


def _episode(f: Finding) -> dict[str, Any]:
    return {
        "state": str(f.state),
        "active_at": f.phase.active_at,
        "fired_at": f.phase.fired_at,
        "resolved_at": f.phase.resolved_at,
        "resolved_by": str(f.resolved_by) if f.resolved_by else None,
    }
