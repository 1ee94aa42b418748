"""Compound conditions (`all:` / `any:`) and `sustained`: verdicts, evidence, ranking and queries."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from diagnosd.engine import Evaluator
from diagnosd.engine.evaluator import sustained_query
from diagnosd.engine.walk import _change
from diagnosd.findings import Verdict
from diagnosd.findings.model import Evidence, RootCause
from diagnosd.findings.stored import decode_evidence, encode_evidence
from diagnosd.render.text import render
from diagnosd.trees.model import Condition, Severity, Text, Tree
from tests.engine.fakes import FakeSource, samples

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
TEXT = {"zh": "中", "en": "en"}


def cond(id_: str, metric: str, compare: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": id_, "title": {"zh": id_, "en": id_}, "query": f"max by ($target) ({metric})", "compare": compare}


def make_tree(detect: dict[str, Any], *nodes: dict[str, Any]) -> Tree:
    return Tree.model_validate(
        {
            "id": "gpu_underutilized",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "params": {"sustain": {"default": "5m", "doc": "d"}},
            "detect": {"title": TEXT, **detect},
            "nodes": list(nodes) or [cond("n", "other", {"above": 1})],
        }
    )


GATE = {"all": [cond("idle", "util", {"below": 40}), {"id": "slow", "title": TEXT, "any": [
    cond("ttft", "ttft", {"ratio_above": 1.5, "baseline": "1d"}),
    cond("e2e", "e2e", {"ratio_above": 1.5, "baseline": "1d"}),
]}]}  # fmt: skip


def by_time(now: float | None, then: float) -> Any:
    return lambda at: samples({"p": then}) if at != AT else (samples({"p": now}) if now is not None else [])


# util now; TTFT now (yesterday 1); e2e now (yesterday 1) -> detect verdict
CASES = [
    (30, 3.0, 1.0, Verdict.MATCHED),  # TTFT alone is up: requests are slow
    (30, 1.0, 3.0, Verdict.MATCHED),
    (30, 1.0, 1.0, Verdict.CLEAR),
    (85, 3.0, 3.0, Verdict.CLEAR),  # busy GPU: clear whatever latency does
    (85, None, None, Verdict.CLEAR),  # one clear condition of all decides
    (30, None, 1.0, Verdict.UNKNOWN),  # an unknown condition never turns into clear
    (30, None, 3.0, Verdict.MATCHED),  # ... but a matched one decides any
]


@pytest.mark.parametrize(("util", "ttft", "e2e", "verdict"), CASES)
async def test_all_and_any_combine_verdicts(util: float, ttft: float | None, e2e: float, verdict: Verdict) -> None:
    source = FakeSource(
        {"util": samples({"p": util}), "ttft": by_time(ttft, 1.0), "e2e": by_time(e2e, 1.0), "other": []}
    )
    diagnosis = await Evaluator(source).diagnose(make_tree(GATE), None, AT)
    (target,) = diagnosis.targets
    assert target.detect.verdict is verdict
    evidence = target.detect.evidence
    assert evidence is not None
    assert evidence.combine == "all"
    idle, slow = evidence.conditions
    assert (idle.check, idle.value, idle.title) == ("detect/idle", util, Text(zh="idle", en="idle"))
    assert slow.combine == "any"
    assert [c.check for c in slow.conditions] == ["detect/slow/ttft", "detect/slow/e2e"]
    assert evidence.value == util  # the headline is the first condition's number, never util + 100


async def test_compound_evidence_is_drawn_one_line_per_condition() -> None:
    source = FakeSource({"util": samples({"p": 30}), "ttft": by_time(3.0, 1.0), "e2e": by_time(1.0, 1.0), "other": []})
    out = render(await Evaluator(source).diagnose(make_tree(GATE), None, AT))
    lines = out.splitlines()
    assert any("[all of]" in line for line in lines)
    assert any(line.strip().startswith("▲ idle") and "30 (threshold < 40)" in line for line in lines)
    assert any(line.strip().startswith("▲ ttft") and "×3" in line for line in lines)
    assert any(line.strip().startswith("· e2e") for line in lines)


def test_compound_evidence_survives_the_store() -> None:
    inner = Evidence(check="c/a", query="a", operator="above", threshold=1, value=2, title=Text(zh="甲", en="a"))
    whole = Evidence(check="c", query="a", operator="above", threshold=1, value=2, combine="all", conditions=(inner,))
    assert decode_evidence(encode_evidence(whole)) == whole


def test_sustained_is_a_low_quantile_over_the_window() -> None:
    above = Condition.model_validate(
        {**cond("q", "waiting", {"above": 10}), "sustained": {"for": "$sustain", "share": 0.8}}
    )
    below = Condition.model_validate({**cond("q", "util", {"below": 20}), "sustained": {"for": "30m", "step": "30s"}})
    assert sustained_query(above, {}) == "quantile_over_time(0.2, (max by ($target) (waiting))[$sustain:1m])"
    assert sustained_query(below, {}) == "quantile_over_time(0.8, (max by ($target) (util))[30m:30s])"


async def test_sustained_evidence_shows_the_quantile_and_the_value_now() -> None:
    detect = {**cond("q", "waiting", {"above": 10}), "sustained": {"for": "$sustain", "share": 0.8}}
    detect.pop("id"), detect.pop("title")
    source = FakeSource(
        {
            "quantile_over_time": samples({"p": 16}),
            "waiting": samples({"p": 30}),
            "other": [],
        }
    )
    diagnosis = await Evaluator(source).diagnose(make_tree(detect), None, AT)
    (target,) = diagnosis.targets
    e = target.detect.evidence
    assert target.symptom_present is True
    assert e is not None
    assert (e.value, e.current, e.sustained_for, e.share) == (16, 30, "5m", 0.8)
    assert "≥ 16 in 80 % of 5 min, now 30 (threshold > 10)" in render(diagnosis)


def test_the_slack_sizes_a_compound_check_by_its_first_ratio_condition() -> None:
    def ratio(check: str, value: float) -> Evidence:
        return Evidence(check=check, query="q", operator="ratio_above", threshold=1.3, value=value, baseline=1.0)

    gate = Evidence(check="c/gate", query="g", operator="above", threshold=0.9, value=0.95)
    compound = Evidence(
        check="c", query="g", operator="above", threshold=0.9, value=0.95, combine="all",
        conditions=(gate, ratio("c/growth", 3.0), ratio("c/other", 10.0)),
    )  # fmt: skip
    cause = RootCause("x", Text(zh="x", en="x"), Severity.WARNING, (), "c", 1, 1.0, (compound,))
    assert _change(cause) == 3.0


@pytest.mark.parametrize(
    "detect",
    [
        {
            "query": "max(a)",
            "compare": {"above": 1},
            "all": [cond("a", "a", {"above": 1}), cond("b", "b", {"above": 1})],
        },
        {"all": [cond("a", "a", {"above": 1})]},
        {"all": [cond("a", "a", {"above": 1}), cond("a", "b", {"above": 1})]},
        {"any": [cond("a", "a", {"above": 1}), cond("b", "b", {"above": 1})], "unit": "s"},
        {"query": "max(a)"},
        {"query": "max(a)", "compare": {"above": 1}, "sustained": {"for": "5m", "share": 1.5}},
    ],
    ids=["both shapes", "one condition", "same ids", "unit on any", "no compare", "share above 1"],
)
def test_malformed_conditions_are_refused(detect: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        make_tree(detect)


async def test_the_json_evidence_holds_each_condition() -> None:
    from diagnosd.render.json import diagnosis as as_json

    source = FakeSource({"util": samples({"p": 30}), "ttft": by_time(3.0, 1.0), "e2e": by_time(None, 1.0), "other": []})
    (target,) = as_json(await Evaluator(source).diagnose(make_tree(GATE), None, AT))["targets"]
    evidence = target["detect"]["evidence"]
    assert target["detect"]["value"] == 30
    assert evidence["combine"] == "all"
    idle, slow = evidence["conditions"]
    assert (idle["check"], idle["verdict"], idle["value"], idle["title"]["en"]) == (
        "detect/idle",
        "matched",
        30,
        "idle",
    )
    ttft, e2e = slow["conditions"]
    assert (ttft["verdict"], ttft["value"], ttft["baseline"]) == ("matched", 3.0, 1.0)
    assert (e2e["verdict"], e2e["reason"]) == ("unknown", "no_data")
