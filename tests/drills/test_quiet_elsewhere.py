"""`quiet_elsewhere`: a scenario's expectations hold, and every tree it expects nothing of stays quiet."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from diagnosd.daemon import compose
from diagnosd.drills.verify import judge, trees_for
from diagnosd.findings.model import Diagnosis
from diagnosd.sim import scenario
from tests.sim.conftest import ANCHOR


def _present_on(pod: str) -> Diagnosis:
    """A diagnosis whose only target shows its symptom (judge reads nothing else of a quiet tree)."""
    target = SimpleNamespace(labels={"namespace": "llm-serving", "pod": pod}, symptom_present=True)
    return cast(Diagnosis, SimpleNamespace(targets=(target,), fleet=()))


def test_the_field_defaults_to_off_and_parses() -> None:
    assert scenario.load("system_prompt_dynamic").quiet_elsewhere is False
    assert scenario.load("healthy_dynamic_prompt").quiet_elsewhere is True


def test_quiet_elsewhere_judges_every_tree_not_only_the_expected_ones() -> None:
    rules = compose.load()
    every = set(rules.ruleset.trees)
    loud = scenario.load("system_prompt_dynamic")
    assert {t.id for t in trees_for(loud, rules)} == {e.symptom for e in loud.expect}
    quiet = scenario.load("healthy_dynamic_prompt")
    assert {t.id for t in trees_for(quiet, rules)} == every
    switched = loud.model_copy(update={"quiet_elsewhere": True})
    assert {t.id for t in trees_for(switched, rules)} == every


def test_a_symptom_on_a_tree_it_expects_nothing_of_fails_the_scenario() -> None:
    rules = compose.load()
    quiet = scenario.load("healthy_dynamic_prompt")
    tree = rules.ruleset.tree("ttft_high")
    assert tree is not None
    [finding] = judge(quiet, tree, _present_on("vllm-llama-8b-x"), ANCHOR)
    assert not finding.ok
    assert "ttft_high present on namespace=llm-serving pod=vllm-llama-8b-x" in finding.problems[0]
