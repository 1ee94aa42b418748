"""The seed-style drawing: connectors, marks, numbers, conclusions under matched nodes."""

from __future__ import annotations

from datetime import UTC, datetime

from diagnosd.findings import CheckResult, Diagnosis, Evidence, NodeKind, Reason, RootCause, TargetDiagnosis, Verdict
from diagnosd.render import json as render_json
from diagnosd.render.text import render
from diagnosd.trees import Severity, Text

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)


def t(en: str) -> Text:
    return Text(en=en, zh=f"中{en}")


def node(id_: str, depth: int, verdict: Verdict, kind: NodeKind = NodeKind.CHECK, **kw: object) -> CheckResult:
    return CheckResult(id=id_, kind=kind, title=t(id_), depth=depth, verdict=verdict, **kw)  # type: ignore[arg-type]


def diagnosis() -> Diagnosis:
    ratio = Evidence(check="a", query="q", operator="ratio_above", threshold=1.3, value=3150, baseline=1200)
    checks = (
        node("a", 1, Verdict.MATCHED, evidence=ratio),
        node("a1", 2, Verdict.UNKNOWN, reason=Reason.METRIC_ABSENT, detail="no series of x"),
        node(
            "a2", 2, Verdict.CLEAR, evidence=Evidence(check="a2", query="q", operator="below", threshold=0.3, value=0.5)
        ),
        node("g", 1, Verdict.MANUAL, kind=NodeKind.GROUP),
        node("m", 2, Verdict.MANUAL, kind=NodeKind.MANUAL, guidance=t("look at the logs")),
        node("b", 1, Verdict.SKIPPED, reason=Reason.PARENT_NOT_MATCHED),
    )
    cause = RootCause(
        cause="prompt_inflation",
        title=t("Prompts grew"),
        severity=Severity.WARNING,
        remediation=(t("chunked prefill"),),
        check="a",
        depth=1,
        excess=2.0,
        evidence=(ratio,),
    )
    target = TargetDiagnosis(
        labels={"namespace": "prod", "pod": "p"},
        symptom_present=True,
        detect=node(
            "detect",
            0,
            Verdict.MATCHED,
            kind=NodeKind.DETECT,
            evidence=Evidence(check="detect", query="q", operator="above", threshold=10, value=25, unit="s"),
        ),
        root_causes=(cause,),
        checks=checks,
    )
    return Diagnosis(
        symptom="ttft_high",
        title=t("TTFT"),
        evaluated_at=AT,
        scope={"pod": "p"},
        target_labels=("namespace", "pod"),
        targets=(target,),
        queries=4,
    )


def test_tree_drawing() -> None:
    assert render(diagnosis()).splitlines()[:14] == [
        "ttft_high · TTFT  @ 2026-03-01T12:00:00Z",
        "scope: pod='p'",
        "",
        "namespace=prod pod=p — SYMPTOM PRESENT: detect  25 s (threshold > 10 s)",
        "├─ ▲ a  3150 vs baseline 1200 = ×2.62 (threshold > ×1.3)",
        "│  │  → Prompts grew",
        "│  │    fix: chunked prefill",
        "│  ├─ ? a1  [unknown: metric absent — no series of x]",
        "│  └─ · a2  0.5 (threshold < 0.3)",
        "├─ ☐ g",
        "│  └─ ☐ m",
        "│        look at the logs",
        "└─ – b",
        "root causes, most likely first:",
    ]


def test_chinese_rendering_uses_zh_texts() -> None:
    out = render(diagnosis(), "zh")
    assert "├─ ▲ 中a  3150" in out
    assert "→ 中Prompts grew" in out
    assert "中look at the logs" in out


def test_json_travels_nan_and_inf_as_prometheus_spells_them() -> None:
    assert render_json.number(float("nan")) == "NaN"
    assert render_json.number(float("inf")) == "+Inf"
    body = render_json.diagnosis(diagnosis())
    assert body["targets"][0]["root_causes"][0]["evidence"][0]["compared"] == 2.625
