"""Every shipped scenario makes the shipped rules find what it promises, through their real queries.

All scenarios' histories go into one real Prometheus (isolated by a scenario label); each
expectation is diagnosed at the anchor: its causes must be among the root causes of its target,
and the symptom must not show elsewhere. The healthy fleet must show no symptom in any tree.
"""

from __future__ import annotations

import pytest

from diagnosd.daemon import compose
from diagnosd.drills.verify import Finding, verify
from diagnosd.sim import scenario
from tests.sim.conftest import ANCHOR


@pytest.fixture(scope="module")
def findings() -> list[Finding]:
    return verify([scenario.load(name) for name in scenario.names()], compose.load(), anchor=ANCHOR)


def test_every_scenario_shows_its_causes_and_nothing_else(findings: list[Finding]) -> None:
    failed = [f"{f.scenario} / {f.symptom} / {f.target}: {'; '.join(f.problems)}" for f in findings if not f.ok]
    assert not failed, "\n".join(failed)


def test_every_expectation_was_judged(findings: list[Finding]) -> None:
    judged = {(f.scenario, f.symptom, f.target) for f in findings}
    for name in scenario.names():
        for expectation in scenario.load(name).expect:
            assert (name, expectation.symptom, expectation.target) in judged
    healthy = {f.symptom for f in findings if f.scenario == "healthy"}
    assert healthy == set(compose.load().ruleset.trees)


def test_a_scenario_that_breaks_nothing_is_caught(tmp_path: object) -> None:
    """The check can fail: a fault scenario whose fault is switched off does not show its cause."""
    quiet = scenario.load("queueing").model_copy(update={"faults": [], "name": "queueing"})
    [finding] = verify([quiet], compose.load(), anchor=ANCHOR, processes=1)
    assert not finding.ok
    assert "missing queueing" in finding.problems[0]
