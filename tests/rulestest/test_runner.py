"""The rules test runner on a real Prometheus: passing and failing expectations, with readable diffs."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pytest

from diagnosd.rulestest.runner import collect, run_tests
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "rules"


def test_fixture_tests_pass(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(only=[], prometheus_binary="prometheus", promtool_binary="promtool")
    assert run_tests(FIXTURE, args) is True
    assert capsys.readouterr().out.splitlines()[-1] == "rules test: 1 passed, 0 failed"


def test_wrong_expectations_fail_with_a_diff(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(FIXTURE, rules)
    test_file = rules / "queue_backlog.test.yaml"
    text = test_file.read_text()
    text = text.replace(
        "        top_cause: kv_pool_full\n        checks: {kv_growth: matched}",
        "        top_cause: requests_not_released\n        checks: {kv_growth: clear}",
    )
    text = text.replace("        symptom_present: false\n        no_cause: true", "        symptom_present: true")
    test_file.write_text(text)
    (result,) = collect(rules)
    assert result.failures == [
        "[namespace=prod pod=vllm-0] top cause: want requests_not_released, got kv_pool_full (all: ['kv_pool_full'])",
        "[namespace=prod pod=vllm-0] check kv_growth: want clear, got matched (matched)",
        "[namespace=prod pod=vllm-1] symptom_present: want True, got False (clear)",
    ]


def test_tree_without_tests_is_a_failure(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(FIXTURE, rules)
    (rules / "queue_backlog.test.yaml").unlink()
    (result,) = collect(rules)
    assert result.failures == ["no test file queue_backlog.test.yaml: every tree ships with its tests"]


def test_explained_and_possible_expectations_are_checked() -> None:
    from dataclasses import replace

    from diagnosd.findings.model import Verdict
    from diagnosd.rulestest.runner import check
    from diagnosd.rulestest.spec import Expectation
    from tests.findings.builders import cause, diagnosis, target
    from tests.findings.builders import check as result

    consequence = replace(cause("batch_too_large"), explained_by=("prompt_inflation",))
    present = replace(
        target("vllm-0", True, [result("batch_too_large", Verdict.MATCHED, 2.0, "batch_too_large")]),
        root_causes=(replace(cause("prompt_inflation"), explains=(consequence,)),),
        consequences=(consequence,),
    )
    where = {"namespace": "prod", "pod": "vllm-0"}
    ok = Expectation(target=where, explained={"batch_too_large": ["prompt_inflation"]})
    assert check(diagnosis(present), ok) == []
    wrong = Expectation(target=where, explained={"prompt_inflation": ["batch_too_large"]}, symptom_unknown=True)
    found = check(diagnosis(present), wrong)
    assert any("want explained by ['batch_too_large'], but it is a root cause" in f for f in found)
    assert any("symptom_present: want unknown, got True" in f for f in found)
    unknown = replace(target("vllm-0", None, []), possible_causes=(cause("quota_missing"),))
    assert check(diagnosis(unknown), Expectation(target=where, possible_causes=["quota_missing"], no_cause=True)) == []
    assert check(diagnosis(unknown), Expectation(target=where, possible_causes=["retry_loop"]))
