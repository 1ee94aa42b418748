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


def test_a_series_given_twice_in_a_test_is_named_not_a_store_failure(tmp_path: Path) -> None:
    # Formerly the duplicate reached promtool, which refused the whole run ("out of order sample")
    # once the run was large enough, naming no test.
    rules = tmp_path / "rules"
    shutil.copytree(FIXTURE, rules)
    test_file = rules / "queue_backlog.test.yaml"
    lines = test_file.read_text().splitlines(keepends=True)
    # The first series, its two lines (series, values), repeated right after it.
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("- series:"))
    lines[first + 2 : first + 2] = lines[first : first + 2]
    test_file.write_text("".join(lines))
    failures = [f for result in collect(rules) for f in result.failures]
    [failure] = [f for f in failures if "given twice" in f]
    assert lines[first].split("'")[1] in failure


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
