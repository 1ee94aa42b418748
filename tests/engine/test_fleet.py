"""No check that cannot fail: samples without target labels are one fleet-level result, never a
verdict on every target (an idle dev GPU somewhere is no model's root cause)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from diagnosd.engine import Evaluator
from diagnosd.engine.evaluator import _answer
from diagnosd.engine.judge import Answer, Key
from diagnosd.findings import Reason, Verdict
from diagnosd.findings.model import Diagnosis
from diagnosd.render import json as render_json
from diagnosd.render import text as render_text
from diagnosd.sources.base import Sample
from diagnosd.trees.model import Tree
from tests.engine.fakes import FakeSource

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
TEXT = {"zh": "中文", "en": "english"}


def make_tree() -> Tree:
    def check(id_: str, query: str, compare: dict[str, Any], **extra: Any) -> dict[str, Any]:
        conclusion = {"cause": id_, "title": {"zh": f"{id_} 中", "en": f"{id_} cause"}, "remediation": [TEXT]}
        return {"id": id_, "title": TEXT, "query": query, "compare": compare, "conclusion": conclusion, **extra}

    return Tree.model_validate(
        {
            "id": "cost_increase",
            "title": TEXT,
            "target": ["model"],
            "detect": {"title": TEXT, "query": "sum by ($target) (spend)", "compare": {"above": 1}},
            "nodes": [
                check("idle_gpu", "sum(gpu_idle)", {"above": 0}, unit="GPUs"),
                check("tokens_up", "sum by ($target) (tokens)", {"above": 100}),
            ],
        }
    )


def diagnose(source: FakeSource) -> Diagnosis:
    return asyncio.run(Evaluator(source).diagnose(make_tree(), None, AT))


def fleet_source(idle: float) -> FakeSource:
    return FakeSource(
        {
            "spend": [Sample({"model": "llama"}, 5.0), Sample({"model": "qwen"}, 0.5)],
            "gpu_idle": [Sample({}, idle)],
            "tokens": [Sample({"model": "llama"}, 50.0), Sample({"model": "qwen"}, 500.0)],
        }
    )


def test_an_unlabelled_answer_is_no_verdict_on_any_target() -> None:
    diagnosis = diagnose(fleet_source(3))
    for target in diagnosis.targets:
        idle = next(c for c in target.checks if c.id == "idle_gpu")
        assert (idle.verdict, idle.reason) == (Verdict.UNKNOWN, Reason.FLEET_LEVEL)
        assert idle.detail == "the answer has no target labels: see fleet-wide"
        assert "idle_gpu" not in [c.cause for c in target.root_causes]
    llama = next(t for t in diagnosis.targets if t.labels == {"model": "llama"})
    assert llama.symptom_present is True
    assert llama.root_causes == ()


def test_it_is_reported_once_as_a_fleet_level_finding() -> None:
    diagnosis = diagnose(fleet_source(3))
    assert [f.check.id for f in diagnosis.fleet] == ["idle_gpu"]
    (idle,) = diagnosis.fleet
    assert idle.check.verdict is Verdict.MATCHED
    assert idle.check.evidence is not None
    assert idle.check.evidence.value == 3.0
    assert idle.finding is not None
    assert idle.finding.cause == "idle_gpu"

    data = render_json.diagnosis(diagnosis)
    assert [f["id"] for f in data["fleet"]] == ["idle_gpu"]
    assert data["fleet"][0]["verdict"] == "matched"
    assert data["fleet"][0]["value"] == 3.0
    assert data["fleet"][0]["finding"]["cause"] == "idle_gpu"
    checks = {c["id"]: c for c in data["targets"][0]["checks"]}
    assert checks["idle_gpu"]["reason"] == "fleet_level"

    text = render_text.render(diagnosis, "en", verbose=True)
    assert "fleet-wide" in text
    assert "idle_gpu cause" in text
    assert "3 GPUs" in text
    zh = render_text.render(diagnosis, "zh", verbose=True)
    assert "全局" in zh
    assert "见“全局”一节" in zh


def test_a_clear_fleet_fact_is_listed_clear() -> None:
    (idle,) = diagnose(fleet_source(0)).fleet
    assert idle.check.verdict is Verdict.CLEAR
    assert idle.finding is None


def test_labelled_answers_make_no_fleet_result() -> None:
    source = FakeSource(
        {
            "spend": [Sample({"model": "llama"}, 5.0)],
            "gpu_idle": [Sample({"model": "llama"}, 2.0)],
            "tokens": [Sample({"model": "llama"}, 50.0)],
        }
    )
    diagnosis = diagnose(source)
    assert diagnosis.fleet == ()
    (llama,) = diagnosis.targets
    assert [c.cause for c in llama.root_causes] == ["idle_gpu"]


def test_a_target_missing_from_a_labelled_answer_gets_no_unlabelled_sample() -> None:
    answer = _answer([Sample({"model": "llama"}, 1.0), Sample({}, 9.0), Sample({"other": "x"}, 7.0)], ["model"])
    key: Key = ("qwen",)
    assert answer.samples(key) == []
    assert answer.fleet_level is False
    assert [s.value for s in answer.fleet] == [9.0, 7.0]
    only_fleet = Answer(fleet=[Sample({}, 9.0)])
    assert only_fleet.fleet_level is True
    assert only_fleet.as_fleet().samples(()) == [Sample({}, 9.0)]
