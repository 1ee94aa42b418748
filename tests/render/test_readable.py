"""Evidence a person reads: units, human numbers, yes/no, plurals, top buckets; a fleet led by its summary."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from diagnosd.daemon import compose
from diagnosd.findings import CheckResult, Diagnosis, Evidence, NodeKind, Reason, TargetDiagnosis, Verdict
from diagnosd.render import units
from diagnosd.render.text import describe, fmt, render
from diagnosd.trees import Text, families
from diagnosd.trees.model import CheckNode, walk
from tests.conftest import RULES

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)


def e(value: float, operator: str = "above", threshold: float = 0.9, unit: str | None = None, **kw: object) -> Evidence:
    return Evidence(check="c", query="q", operator=operator, threshold=threshold, value=value, unit=unit, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("evidence", "en", "zh"),
    [
        (e(51, threshold=90, unit="%"), "51 % (threshold > 90 %)", "51 %（阈值 > 90 %）"),
        (e(0.51, threshold=0.9, unit="ratio"), "51 % (threshold > 90 %)", "51 %（阈值 > 90 %）"),
        (
            e(13170.4, threshold=50000, unit="tokens"),
            "13.2k tokens (threshold > 50k tokens)",
            "13.2k token（阈值 > 50k token）",
        ),
        (e(1, threshold=10, unit="requests"), "1 request (threshold > 10 requests)", "1 个请求（阈值 > 10 个请求）"),
        (e(0.35, threshold=2, unit="s"), "350 ms (threshold > 2 s)", "350 ms（阈值 > 2 s）"),
        (e(1.2, threshold=0.5, unit="s"), "1.2 s (threshold > 500 ms)", "1.2 s（阈值 > 500 ms）"),
        (e(1, threshold=0.5, unit="bool"), "yes", "是"),
        (e(0, threshold=0.5, unit="bool"), "no", "否"),
        (e(2.5e9, threshold=1e9, unit="B/s"), "2.5 GB/s (threshold > 1 GB/s)", "2.5 GB/秒（阈值 > 1 GB/秒）"),
        (
            e(170, "delta_above", 5, "requests", baseline=20),
            "170 requests vs baseline 20 requests = +150 requests (threshold > +5 requests)",
            "170 个请求，基线 20 个请求，差值 +150 个请求（阈值 > +5 个请求）",
        ),
        (
            e(0.12, "ratio_below", 0.7, "ratio", baseline=0.6),
            "12 % vs baseline 60 % = ×0.2 (threshold < ×0.7)",
            "12 %，基线 60 %，比值 ×0.2（阈值 < ×0.7）",
        ),
        (
            e(100000, threshold=50000, unit="tokens", context={"top_bucket": 100000}),
            "≥ 100k tokens (top bucket) (threshold > 50k tokens)",
            "≥ 100k token（最高桶）（阈值 > 50k token）",
        ),
        (
            e(float("inf"), threshold=30, unit="s"),
            "≥ ∞ (top bucket) (threshold > 30 s)",
            "≥ ∞（最高桶）（阈值 > 30 s）",
        ),
        (
            e(
                0.03,
                threshold=0.9,
                unit="ratio",
                assumed={"max_num_seqs": 256.0},
                context={"aborted_per_second": 0.681},
            ),
            "3 % (threshold > 90 %)  (assumed max_num_seqs=256)  [aborted_per_second=0.681 req/s]",
            "3 %（阈值 > 90 %）  （假设值 max_num_seqs=256）  [aborted_per_second=0.681 请求/秒]",
        ),
    ],
)
def test_evidence_reads_like_a_person_would_say_it(evidence: Evidence, en: str, zh: str) -> None:
    assert describe(evidence) == en
    assert describe(evidence, "zh") == zh


def test_numbers_are_human_and_never_in_exponent_form() -> None:
    assert [fmt(v) for v in (13170.4, 100000, 8192, 0.02734, 1234.5, 2.5e6, 0, None)] == [
        "13.2k",
        "100k",
        "8192",
        "0.0273",
        "1234",
        "2.5M",
        "0",
        "n/a",
    ]
    assert units.quantity(90, "s") == "90 s"
    assert units.quantity(300, "s") == "5 min"
    assert units.quantity(3 * 86400, "s") == "3 d"
    assert units.quantity(3, "restarts") == "3 restarts"
    assert units.quantity(1, "restarts") == "1 restart"


def test_every_unit_in_the_shipped_rules_is_one_the_renderer_knows() -> None:
    used = set()
    for tree in compose.load(RULES).ruleset.trees.values():
        used.add((tree.id, tree.detect.unit))
        for node, _ in walk(list(tree.nodes)):
            if isinstance(node, CheckNode):
                used |= {(tree.id, node.unit)} | {(tree.id, c.unit) for c in node.context}
    assert {(tree, unit) for tree, unit in used if unit is not None and unit not in units.UNITS} == set()


def t(en: str) -> Text:
    return Text(en=en, zh=f"中{en}")


def target(pod: str, present: bool | None, value: float) -> TargetDiagnosis:
    detect = Evidence(check="detect", query="q", operator="above", threshold=10, value=value, unit="requests")
    checks = (
        CheckResult(id="g", kind=NodeKind.GROUP, title=t("heading"), depth=1, verdict=Verdict.UNKNOWN),
        CheckResult(
            id="a", kind=NodeKind.CHECK, title=t("a"), depth=2, verdict=Verdict.UNKNOWN, reason=Reason.NO_BASELINE
        ),
    )
    return TargetDiagnosis(
        labels={"pod": pod},
        symptom_present=present,
        detect=CheckResult(
            id="detect",
            kind=NodeKind.DETECT,
            title=t("waiting"),
            depth=0,
            verdict={True: Verdict.MATCHED, False: Verdict.CLEAR, None: Verdict.UNKNOWN}[present],
            evidence=detect if present is not None else None,
            reason=None if present is not None else Reason.NO_DATA,
        ),
        root_causes=(),
        checks=checks,
    )


def fleet() -> Diagnosis:
    targets = (target("ok-0", False, 0), target("bad", True, 162), target("ok-1", False, 1), target("dark", None, 0))
    return Diagnosis(
        symptom="queue_backlog",
        title=t("Queue"),
        evaluated_at=AT,
        scope={},
        target_labels=("pod",),
        targets=targets,
        queries=3,
    )


def test_a_fleet_leads_with_its_summary_and_the_faulty_target_in_full() -> None:
    lines = render(fleet()).splitlines()
    assert lines[1] == "1 of 4 targets has the symptom, 2 do not, 1 unknown"
    assert lines[3] == "pod=bad — SYMPTOM PRESENT: waiting  162 requests (threshold > 10 requests)"
    assert "├─ ? heading  [some checks below could not be looked at]" not in lines  # last sibling
    assert "└─ ? heading  [some checks below could not be looked at]" in lines
    assert "unknown: None" not in "\n".join(lines)
    tail = lines[lines.index("symptom unknown, nothing matched: waiting") :]
    assert tail[:5] == [
        "symptom unknown, nothing matched: waiting",
        "  ? pod=dark  [unknown: no data]  (0 clear, 1 unknown)",
        "",
        "without the symptom: waiting",
        "  · pod=ok-0  0 requests (threshold > 10 requests)",
    ]
    assert "  · pod=ok-1  1 request (threshold > 10 requests)" in tail
    assert "(--verbose or verbose=true shows every target in full)" in tail


def test_verbose_draws_every_target_present_ones_first() -> None:
    out = render(fleet(), verbose=True)
    heads = [line for line in out.splitlines() if line.startswith("pod=")]
    assert [h.split(" ")[0] for h in heads] == ["pod=bad", "pod=dark", "pod=ok-0", "pod=ok-1"]
    assert "without the symptom" not in out


def test_the_fleet_summary_in_chinese() -> None:
    out = render(fleet(), "zh")
    assert "4 个目标中 1 个有此症状，2 个没有，1 个未知" in out
    assert "[下面有些检查无法查看]" in out
    assert "无此症状的目标：" in out


def test_absent_notes_in_chinese_keep_names_and_counts() -> None:
    (note,) = families.absent_notes({"litellm_spend_metric_total": ["litellm_spend_metric_total"]}, set())
    assert "LiteLLM Enterprise" in note
    assert "/metrics/" in note
    assert "master key" in note
    zh = families.translate(note)
    assert zh.startswith("Prometheus 上没有 LiteLLM 指标（本树读取 1 个：litellm_spend_metric_total）")
