"""Review of the sliced early judging (engine/early.py, Evaluator._run) and the sliced walk.

1. Interleavings: no step judged twice, none before its parent's verdicts are published, none
   lost, and the answers a step's question was built from unchanged while it is judged.
2. Failure and cancellation: a bug in the early judging propagates and ends every request; a
   diagnosis cancelled twice (a timeout, then an outer cancel) ends every request.
3. The sliced walk's Diagnosis equals the unsliced one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from unittest import mock

import pytest

import diagnosd.engine.early as early_mod
import diagnosd.engine.evaluator as evaluator_mod
from diagnosd.engine import Evaluator, Scope
from diagnosd.engine.early import EarlyJudge, Step
from diagnosd.sources.base import Sample
from tests.engine.fakes import FakeSource, Turns
from tests.engine.test_early import rich_tree
from tests.engine.test_early_review import (
    Ordered,
    every_feature_answers,
    every_feature_tree,
    metric,
    others,
    pods,
    shuffled,
    two_level_tree,
)
from tests.engine.test_evaluator import AT

# --- 1. interleavings -----------------------------------------------------------------------


class Watch:
    """Instruments every EarlyJudge of a diagnosis: slice 1 (a pause after every target), and a
    log of what each step saw when it started and at each of its pauses."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.instances: list[EarlyJudge] = []
        self.started: list[str] = []
        self.problems: list[str] = []
        self.judging: str | None = None
        self.arrived_while_judging = 0
        post, judge = EarlyJudge.__post_init__, EarlyJudge.judge
        watch = self

        def post_init(self: EarlyJudge) -> None:
            post(self)
            self.slice = 1
            watch.instances.append(self)

        def judging(self: EarlyJudge, step: Step, answers: Any) -> Iterator[None]:
            if step.id in watch.started:
                watch.problems.append(f"{step.id} judged twice")
            if step.above is not None and step.above not in self.judged:
                watch.problems.append(f"{step.id} judged before {step.above} was published")
            if step.id in self.judged:
                watch.problems.append(f"{step.id} already published when judged")
            watch.started.append(step.id)
            snapshot = dict(answers)
            watch.judging = step.id
            try:
                for _ in judge(self, step, answers):
                    yield
                    if answers.keys() != snapshot.keys() or any(answers[k] is not v for k, v in snapshot.items()):
                        watch.problems.append(f"answers changed while {step.id} was judged")
            finally:
                watch.judging = None
            if step.id not in self.judged:
                watch.problems.append(f"{step.id} not published once exhausted")

        monkeypatch.setattr(EarlyJudge, "__post_init__", post_init)
        monkeypatch.setattr(EarlyJudge, "judge", judging)


class Noting(Ordered):
    """Ordered, counting the answers that arrive while a step is being judged."""

    def __init__(self, watch: Watch, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.watch = watch

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        try:
            return await super().query(promql, at)
        finally:
            if self.watch.judging is not None:
                self.watch.arrived_while_judging += 1


@pytest.mark.parametrize("scope", [None, Scope.of({"pod": "p2"})], ids=["fleet", "one-pod"])
async def test_no_step_judged_twice_early_or_lost_and_answers_fixed_while_judged(
    scope: Scope | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = every_feature_tree()
    present = set(every_feature_answers()) - {metric(18)}
    with mock.patch.object(EarlyJudge, "ready", return_value=None):
        reference = await Evaluator(Ordered(every_feature_answers(), shuffled(0), present=present)).diagnose(
            tree, scope, AT
        )
    watch = Watch(monkeypatch)
    for seed in range(8):
        watch.instances.clear()
        watch.started.clear()
        source = Noting(watch, every_feature_answers(), shuffled(seed), present=present)
        diagnosis = await Evaluator(source).diagnose(tree, scope, AT)
        assert watch.problems == [], f"seed {seed}"
        (judge,) = watch.instances
        ids = [s.id for s in judge.steps]
        # Every step judged exactly once (none lost for the walk to redo), in an order where a
        # parent always comes first.
        assert sorted(watch.started) == sorted(ids), f"seed {seed}"
        assert set(judge.judged) == set(ids), f"seed {seed}"
        assert judge.ready({}) is None  # nothing left waiting
        assert diagnosis == reference, f"seed {seed}"
    # The interleaving the review is about did happen: answers arrived mid-judging.
    assert watch.arrived_while_judging > 0


# --- 2. failures and cancellation -----------------------------------------------------------

MANY = [f"p{i}" for i in range(450)]


class Hanging(FakeSource):
    """`slow` queries hang until cancelled; their cleanup takes turns; `ended` counts every query
    that has finished, its cleanup completed or not, `cleaned` those whose cleanup completed."""

    def __init__(self, answers: dict[str, Any], slow: str) -> None:
        super().__init__(answers)
        self.slow = slow
        self.started = self.cleaned = self.ended = 0
        self.closing = asyncio.Event()

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        if self.slow not in promql:
            await asyncio.sleep(0)
            return await super().query(promql, at)
        self.started += 1
        try:
            try:
                await asyncio.sleep(30)
            finally:
                self.closing.set()
                for _ in range(5):
                    await asyncio.sleep(0)  # closing the connection
                self.cleaned += 1
        finally:
            self.ended += 1
        raise AssertionError("unreachable")


def many_answers() -> dict[str, Any]:
    return {metric(i): pods({p: 5.0 for p in MANY}) for i in range(4)}


@pytest.mark.parametrize("after", [0, 1, 333], ids=["at-first-target", "first-slice", "third-slice"])
async def test_a_bug_in_early_judging_propagates_and_ends_every_request(
    after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    reported: list[Any] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context.get("message")))
    original = early_mod.judge
    calls = 0

    def buggy(question: Any, key: Any, context: Any = None) -> Any:
        nonlocal calls
        if question.id == "a":
            calls += 1
            if calls > after:
                raise RuntimeError("bug in judge")
        return original(question, key, context)

    monkeypatch.setattr(early_mod, "judge", buggy)
    source = Hanging(many_answers(), slow=metric(3))
    before = others()
    try:
        with pytest.raises(RuntimeError, match="bug in judge"):
            await Evaluator(source).diagnose(two_level_tree(), at=AT)
        assert source.started == 1
        assert source.ended == source.cleaned == 1, "returned while a request was still running"
        assert others() - before == set()
        for _ in range(5):
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert reported == []


async def test_a_diagnosis_cancelled_twice_at_once_ends_every_request() -> None:
    source = Hanging(many_answers(), slow=metric(3))
    before = others()
    task = asyncio.ensure_future(Evaluator(source).diagnose(two_level_tree(), at=AT))
    await asyncio.sleep(0.01)
    task.cancel()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.started == source.ended == source.cleaned == 1
    assert others() - before == set()


async def test_a_timeout_then_an_outer_cancel_ends_every_request_and_cancels() -> None:
    """asyncio.timeout fires (the requests are being closed), then the caller cancels too: the
    caller sees CancelledError (not TimeoutError) and no request is still running."""
    source = Hanging(many_answers(), slow=metric(3))
    before = others()

    async def bounded() -> None:
        async with asyncio.timeout(0.01):
            await Evaluator(source).diagnose(two_level_tree(), at=AT)

    task = asyncio.ensure_future(bounded())
    await source.closing.wait()  # the timeout fired: the hanging request is closing
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.started == source.ended == 1, "returned while a request was still running"
    assert others() - before == set()


async def test_a_second_cancel_does_not_cut_a_request_s_closing_short() -> None:
    """The first cancel asked the requests to end; the diagnosis then waits for them. A second
    cancel arriving while they close is forwarded by gather into them, interrupting the closing
    (a connection left half-closed) instead of letting it finish."""
    source = Hanging(many_answers(), slow=metric(3))

    async def bounded() -> None:
        async with asyncio.timeout(0.01):
            await Evaluator(source).diagnose(two_level_tree(), at=AT)

    task = asyncio.ensure_future(bounded())
    await source.closing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert source.cleaned == 1, "the second cancel interrupted the request's cleanup"


# --- 3. the sliced walk ---------------------------------------------------------------------

FLEET = [f"p{i:03d}" for i in range(173)]


def rich_answers() -> dict[str, Any]:
    n = len(FLEET)
    return {
        "waiting": pods({p: 5.0 + (i % 7) * 3 for i, p in enumerate(FLEET)}),
        "kv": pods({p: (0.95 if i % 3 else 0.4) for i, p in enumerate(FLEET) if i % 11}),
        "running": pods({p: float(i) for i, p in enumerate(FLEET)}),
        "swap": pods({p: float(i % 3) for i, p in enumerate(FLEET)}),
        "prefill": lambda at: pods({p: (3.0 if at == AT and i % 2 else 1.0) * (i + 1) for i, p in enumerate(FLEET)}),
        "hot": pods({p: 60.0 + (i * 37 % n) / 4 for i, p in enumerate(FLEET)}),
        "busy": pods({p: (i % 5) / 4 for i, p in enumerate(FLEET)}),
    }


@pytest.mark.parametrize("walk_slice", [1, 7, 50])
async def test_the_sliced_walk_equals_the_unsliced(walk_slice: int, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = rich_tree()
    monkeypatch.setattr(evaluator_mod, "WALK_SLICE", 10**9)
    whole = await Evaluator(FakeSource(rich_answers())).diagnose(tree, at=AT)
    monkeypatch.setattr(evaluator_mod, "WALK_SLICE", walk_slice)
    sliced = await Evaluator(FakeSource(rich_answers())).diagnose(tree, at=AT)
    assert len(whole.targets) == len(FLEET)
    assert sliced == whole
    # ... and equal to the walk judging everything itself, unsliced (the reference before).
    with mock.patch.object(EarlyJudge, "ready", return_value=None):
        monkeypatch.setattr(evaluator_mod, "WALK_SLICE", 10**9)
        reference = await Evaluator(FakeSource(rich_answers())).diagnose(tree, at=AT)
    assert sliced == reference


async def test_concurrent_sliced_diagnoses_do_not_mix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two diagnoses on one Evaluator whose walks interleave slice by slice equal each alone."""
    monkeypatch.setattr(evaluator_mod, "WALK_SLICE", 3)
    evaluator = Evaluator(FakeSource(rich_answers()))
    trees = [rich_tree(), every_feature_tree()]
    scoped = Scope.of({"pod": "p005"})
    present = set(every_feature_answers()) - {metric(18)}
    other = Evaluator(FakeSource(every_feature_answers(), present=present))
    alone = [
        await evaluator.diagnose(trees[0], at=AT),
        await other.diagnose(trees[1], at=AT),
        await evaluator.diagnose(trees[0], scoped, AT),
    ]
    together = await asyncio.gather(
        evaluator.diagnose(trees[0], at=AT), other.diagnose(trees[1], at=AT), evaluator.diagnose(trees[0], scoped, AT)
    )
    assert list(together) == alone
    assert [t.labels["pod"] for t in together[2].targets] == ["p005"]


async def test_the_event_loop_runs_between_walk_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    original = evaluator_mod.diagnose_target

    def counting(*args: Any, **kw: Any) -> Any:
        seen.append(turns.count)
        return original(*args, **kw)

    monkeypatch.setattr(evaluator_mod, "diagnose_target", counting)
    async with Turns() as turns:
        diagnosis = await Evaluator(FakeSource(rich_answers())).diagnose(rich_tree(), at=AT)
    assert len(diagnosis.targets) == len(FLEET) == len(seen)
    # 173 targets, 50 at a time: four slices, the loop turning between each.
    assert len(set(seen)) == 4
    assert all(len({seen[i] for i in range(j, min(j + 50, len(seen)))}) == 1 for j in range(0, len(seen), 50))
