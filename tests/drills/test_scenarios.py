"""Every shipped scenario makes the shipped rules find what it promises, through their real queries.

All scenarios' histories go into one real Prometheus (isolated by a scenario label); each
expectation is diagnosed at the anchor: its causes must be among the root causes of its target,
and the symptom must not show elsewhere. The healthy fleet must show no symptom in any tree. The
same holds walked as rounds walk (narrowed to where the symptom is not clear), and each narrowed
diagnosis says what the whole walk says of every target.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from diagnosd.daemon import compose
from diagnosd.drills.verify import LABEL, Finding, backfilled, evaluate, trees_for, verify
from diagnosd.engine import Scope
from diagnosd.findings.lifecycle import Observed, Trigger
from diagnosd.findings.model import Diagnosis, TargetDiagnosis
from diagnosd.findings.observe import observe
from diagnosd.promlocal import LocalPrometheus
from diagnosd.sim import scenario
from diagnosd.sources import PrometheusConfig
from tests.sim.conftest import ANCHOR


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Every scenario in one real Prometheus: its URL."""
    work = tmp_path_factory.mktemp("scenarios")
    scenarios = [scenario.load(name) for name in scenario.names()]
    tsdb = backfilled(scenarios, compose.load(), work, anchor=ANCHOR, seed=0)
    with LocalPrometheus(work / "prometheus", tsdb=tsdb) as prom:
        yield prom.url


def judged(url: str, *, narrowed: bool) -> list[Finding]:
    scenarios = [scenario.load(name) for name in scenario.names()]
    return asyncio.run(evaluate(url, scenarios, compose.load(), ANCHOR, narrowed=narrowed))


@pytest.fixture(scope="module")
def findings(fleets: str) -> list[Finding]:
    return judged(fleets, narrowed=False)


def failures(findings: list[Finding]) -> list[str]:
    return [f"{f.scenario} / {f.symptom} / {f.target}: {'; '.join(f.problems)}" for f in findings if not f.ok]


def test_every_scenario_shows_its_causes_and_nothing_else(findings: list[Finding]) -> None:
    failed = failures(findings)
    assert not failed, "\n".join(failed)


def test_walked_as_rounds_walk_every_scenario_shows_its_causes_and_nothing_else(fleets: str) -> None:
    narrowed = judged(fleets, narrowed=True)
    failed = failures(narrowed)
    assert not failed, "\n".join(failed)
    assert len(narrowed) >= len(scenario.names())


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


def said(t: TargetDiagnosis) -> tuple[Any, ...]:
    """What a target's diagnosis says, but the query texts (a narrowed walk's carry its scope)."""
    return (
        t.symptom_present,
        t.detect.verdict,
        t.detect.reason,
        t.detect.evidence.value if t.detect.evidence else None,
        [(c.cause, c.check, [e.value for e in c.evidence]) for c in t.root_causes],
        [c.cause for c in t.consequences],
        [c.cause for c in t.possible_causes],
        [(c.id, c.verdict, c.reason, c.evidence.value if c.evidence else None) for c in t.checks],
    )


def holding(d: Diagnosis) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    return {(o.cause, tuple(sorted(o.labels.items()))) for o in observe(d) if o.seen is Observed.HOLDS}


def test_a_narrowed_diagnosis_says_what_the_whole_walk_says(fleets: str) -> None:
    """Every scenario's trees (all 20 for the healthy fleets), walked whole and narrowed: the same
    targets in the same order; where the symptom is not clear, the same diagnosis; where it is, the
    same detect and no checks; the same causes holding, fleet-level ones included."""
    seen = asyncio.run(_compare(fleets))
    # Not vacuous: every kind of target was met, and most walks were narrowed.
    assert seen["present"] >= 50
    assert seen["unknown"] >= 10
    assert seen["clear"] >= 1000
    assert seen["walked"] >= 50


async def _compare(url: str) -> Counter[str]:
    rules = compose.load()
    at = datetime.fromtimestamp(ANCHOR, UTC)
    seen: Counter[str] = Counter()
    differences: list[str] = []
    limit = asyncio.Semaphore(4)
    async with compose.diagnoser(PrometheusConfig(url=url, timeout=60.0), rules, strict_labels=[LABEL]) as diagnoser:

        async def one(name: str, tree: Any) -> None:
            scope = Scope.of({LABEL: name})
            async with limit:
                whole = (await diagnoser.diagnose(tree, scope, at, Trigger.CLI)).diagnosis
                narrow = (await diagnoser.diagnose(tree, scope, at, Trigger.ROUND, narrowed=True)).diagnosis
            where = f"{name} / {tree.id}"
            if [t.labels for t in narrow.targets] != [t.labels for t in whole.targets]:
                differences.append(f"{where}: targets {len(narrow.targets)} against {len(whole.targets)}")
                return
            for mine, theirs in zip(narrow.targets, whole.targets, strict=True):
                if theirs.symptom_present is False:
                    seen["clear"] += 1
                    if mine.checks or said(mine)[:4] != said(theirs)[:4]:
                        differences.append(f"{where} {dict(mine.labels)}: clear differently")
                else:
                    seen["present" if theirs.symptom_present else "unknown"] += 1
                    if said(mine) != said(theirs):
                        differences.append(f"{where} {dict(mine.labels)}: {said(mine)} against {said(theirs)}")
            if holding(narrow) != holding(whole):
                differences.append(f"{where}: holding {holding(narrow)} against {holding(whole)}")
            seen["walked"] += any(t.symptom_present is not False for t in whole.targets)

        pairs = [(s.name or "?", t) for s in map(scenario.load, scenario.names()) for t in trees_for(s, rules)]
        await asyncio.gather(*(one(name, tree) for name, tree in pairs))
    assert not differences, "\n".join(differences[:20])
    return seen
