"""The root-cause listing of the text tree: consequences under their cause, possible causes as such."""

from __future__ import annotations

from dataclasses import replace

from diagnosd.findings.model import Verdict
from diagnosd.render import json as render_json
from diagnosd.render.text import render
from tests.findings.builders import cause, check, diagnosis, target


def _explained() -> tuple[object, object]:
    consequence = replace(cause("gpu_compute_contention"), explained_by=("prompt_inflation",))
    root = replace(cause("prompt_inflation"), explains=(consequence,))
    return root, consequence


def test_an_explained_cause_is_shown_under_its_cause_not_as_a_root_cause() -> None:
    root, consequence = _explained()
    checks = [
        check("prompt_inflation", Verdict.MATCHED, 0.95, "prompt_inflation"),
        check("gpu_compute_contention", Verdict.MATCHED, 0.95, "gpu_compute_contention"),
    ]
    t = replace(target("vllm-0", True, checks), root_causes=(root,), consequences=(consequence,))
    text = render(diagnosis(t), "en")
    assert "  1. prompt_inflation [warning]" in text
    assert "↳ gpu_compute_contention [warning] gpu_compute_contention title: explained by prompt_inflation" in text
    assert "2. gpu_compute_contention" not in text
    data = render_json.target(t)
    assert [c["cause"] for c in data["root_causes"]] == ["prompt_inflation"]
    assert data["root_causes"][0]["explains"][0]["cause"] == "gpu_compute_contention"
    assert data["consequences"][0]["explained_by"] == ["prompt_inflation"]


def test_an_unknown_symptom_says_its_causes_are_not_established() -> None:
    checks = [check("quota_missing", Verdict.MATCHED, 0.95, "quota_missing")]
    t = replace(target("vllm-0", None, checks), possible_causes=(cause("quota_missing"),))
    text = render(diagnosis(t), "en")
    assert "quota_missing [warning] quota_missing title — would explain it, symptom not established" in text
    data = render_json.target(t)
    assert data["root_causes"] == []
    assert [c["cause"] for c in data["possible_causes"]] == ["quota_missing"]


def test_a_cause_an_unchecked_cause_would_explain_names_what_could_not_be_checked() -> None:
    checks = [
        check("batch_too_large", Verdict.MATCHED, 4.8, "batch_too_large"),
        check("gpu_compute_contention", Verdict.SKIPPED, None, "gpu_compute_contention"),
    ]
    possible = replace(cause("batch_too_large"), unsettled_by=("gpu_compute_contention",))
    t = replace(target("vllm-0", True, checks), possible_causes=(possible,))
    text = render(diagnosis(t), "en")
    assert "possible causes (each may be a consequence of a check that could not run):" in text
    assert (
        "1. batch_too_large [warning] batch_too_large title — not a root cause until these are checked "
        "(it may be their consequence): gpu_compute_contention"
    ) in text
    # Neither a root cause nor "nothing found".
    assert "root causes, most likely first" not in text
    assert "no root cause found" not in text
    data = render_json.target(t)
    assert data["root_causes"] == []
    assert data["possible_causes"][0]["unsettled_by"] == ["gpu_compute_contention"]
