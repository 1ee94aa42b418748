"""Checks judged as their answers arrive: the verdicts are the walk's own, whatever order the
answers come in, and judging starts before the slowest answer is in."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from diagnosd.engine import Evaluator
from diagnosd.engine.early import EarlyJudge
from diagnosd.errors import SourceTimeout
from diagnosd.findings import Verdict
from diagnosd.findings.model import Diagnosis
from diagnosd.sources.base import Sample
from diagnosd.trees.model import Tree
from tests.engine.fakes import FakeSource, Turns, samples
from tests.engine.test_evaluator import AT, TEXT, check, conclusion, make_tree

PODS = [f"p{i}" for i in range(6)]


def rich_tree() -> Tree:
    """A check under a check, a group, a manual check, a baseline, a context value, an all-of."""
    return make_tree(
        check(
            "kv",
            "kv",
            {"above": 0.9},
            conclusion=conclusion("kv_full"),
            context=[{"id": "running", "title": TEXT, "query": "max by ($target) (running)"}],
            children=[check("swap", "swap", {"above": 1}, conclusion=conclusion("swapping"))],
        ),
        {
            "id": "config",
            "title": TEXT,
            "group": True,
            "children": [
                check("prefill", "prefill", {"ratio_above": 1.5, "baseline": "1d"}, conclusion=conclusion("prefill")),
                {"id": "look", "title": TEXT, "manual": TEXT, "conclusion": conclusion("by_hand")},
            ],
        },
        {
            "id": "both",
            "title": TEXT,
            "all": [
                {"id": "hot", "title": TEXT, "query": "max by ($target) (hot)", "compare": {"above": 80}},
                {"id": "busy", "title": TEXT, "query": "max by ($target) (busy)", "compare": {"above": 0.5}},
            ],
            "conclusion": conclusion("hot_and_busy"),
        },
    )


def fleet(delays: dict[str, float]) -> FakeSource:
    """Every pod somewhere between healthy and faulty; some absent from some answers, one error."""
    answers: dict[str, Any] = {
        "waiting": samples({p: 5.0 + 10 * i for i, p in enumerate(PODS)}),  # p0 clear, the rest matched
        "kv": samples({"p0": 0.95, "p1": 0.5, "p2": 0.97, "p3": 0.4, "p4": 0.99}),  # p5 has no sample
        "running": samples({p: float(i) for i, p in enumerate(PODS)}),
        "swap": samples({p: float(i % 3) for i, p in enumerate(PODS)}),
        "prefill": lambda at: samples({p: (3.0 if at == AT else 1.0) * (i + 1) for i, p in enumerate(PODS)}),
        "hot": samples({p: 70.0 + 5 * i for i, p in enumerate(PODS)}),
        "busy": SourceTimeout("busy took too long", url="http://prometheus"),
    }
    return Delayed(answers, delays=delays)


class Delayed(FakeSource):
    def __init__(self, answers: dict[str, Any], delays: dict[str, float]) -> None:
        super().__init__(answers)
        self.delays = delays

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        for name, seconds in self.delays.items():
            if name in promql:
                await asyncio.sleep(seconds)
        return await super().query(promql, at)


async def diagnose(source: FakeSource) -> Diagnosis:
    return await Evaluator(source).diagnose(rich_tree(), at=AT)


@pytest.mark.parametrize(
    "slow",
    [
        pytest.param((), id="all-at-once"),
        pytest.param(("waiting",), id="detect-last"),
        pytest.param(("kv",), id="parent-after-child"),
        pytest.param(("swap", "hot"), id="child-and-condition-last"),
        pytest.param(("prefill",), id="baseline-last"),
        pytest.param(("running",), id="context-last"),
    ],
)
async def test_the_verdicts_are_the_walks_own_in_any_order_of_answers(
    slow: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    early = await diagnose(fleet(dict.fromkeys(slow, 0.02)))
    # The reference: nothing judged early, the walk judges every check of every target itself.
    monkeypatch.setattr(EarlyJudge, "ready", lambda self, answers: None)
    walked = await diagnose(fleet(dict.fromkeys(slow, 0.02)))
    assert early == walked
    # The fleet exercises every path: a root cause, a consequence-free clear target, a skipped
    # child, a check with no sample, and a condition that timed out.
    by_pod = {t.labels["pod"]: t for t in early.targets}
    assert by_pod["p0"].symptom_present is False
    assert [c.cause for c in by_pod["p5"].root_causes] == ["prefill"]
    assert "swapping" in {c.cause for c in by_pod["p2"].root_causes}  # the child of a matched check
    verdicts = {c.verdict for t in early.targets for c in t.checks}
    assert {Verdict.MATCHED, Verdict.CLEAR, Verdict.SKIPPED, Verdict.UNKNOWN, Verdict.MANUAL} <= verdicts


async def test_checks_are_judged_while_the_slowest_answer_is_still_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    judged: list[str] = []
    released = asyncio.Event()
    original = EarlyJudge.judge

    def judge(self: EarlyJudge, step: Any, answers: Any) -> Iterator[None]:
        yield from original(self, step, answers)
        judged.append(step.id)
        if step.id == "kv":
            released.set()  # only now may the slow answer come: kv was judged without it

    monkeypatch.setattr(EarlyJudge, "judge", judge)

    class Held(Delayed):
        async def query(self, promql: str, at: datetime) -> list[Sample]:
            if "prefill" in promql:
                await asyncio.wait_for(released.wait(), timeout=5)
            return await super().query(promql, at)

    diagnosis = await Evaluator(Held(fleet({}).answers, delays={})).diagnose(rich_tree(), at=AT)
    assert judged.index("kv") < judged.index("prefill")
    assert any(t.root_causes for t in diagnosis.targets)


async def test_a_child_is_judged_early_only_where_its_parent_matched(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, set[tuple[str, ...]]] = {}
    original = EarlyJudge.judge

    def judge(self: EarlyJudge, step: Any, answers: Any) -> Iterator[None]:
        yield from original(self, step, answers)
        seen[step.id] = set(self.judged[step.id])

    monkeypatch.setattr(EarlyJudge, "judge", judge)
    diagnosis = await diagnose(fleet({}))
    matched = {
        tuple(t.labels.values())
        for t in diagnosis.targets
        for c in t.checks
        if c.id == "kv" and c.verdict is Verdict.MATCHED
    }
    assert matched
    assert seen["swap"] == matched
    assert len(seen["kv"]) == len(PODS) - 1  # every pod its answer names


async def test_a_check_over_many_targets_is_judged_in_slices_the_event_loop_runs_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import diagnosd.engine.early as early

    seen: dict[str, list[int]] = {}
    original = early.judge

    def judge(question: Any, key: Any, context: Any = None) -> Any:
        seen.setdefault(question.id, []).append(turns.count)  # the loop's turns so far, per verdict
        return original(question, key, context)

    monkeypatch.setattr(early, "judge", judge)
    async with Turns() as turns:
        pods = {f"p{i}": 20.0 for i in range(1000)}
        tree = make_tree(check("a", "kv", {"above": 0.9}, conclusion=conclusion("kv_full")))
        source = FakeSource({"waiting": samples(pods), "kv": samples(dict.fromkeys(pods, 0.95))})
        diagnosis = await Evaluator(source).diagnose(tree, at=AT)
    assert len(diagnosis.targets) == 1000
    # 1000 verdicts of one check, 200 at a time: the loop ran between the slices, not only after.
    assert len(seen["a"]) == 1000
    assert EarlyJudge.slice == 200
    assert len(set(seen["a"])) >= 5
