"""The early judging (engine/early.py) and the walk around it, against a reference: the same
engine with early judging switched off, so that the walk judges every check of every target itself
after the last answer (what it did before checks were judged early). Every diagnosis must equal
the reference's, whatever the order of the answers; and a diagnosis cancelled or failing must end
every request it started.
"""

from __future__ import annotations

import asyncio
import gc
import random
import weakref
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from diagnosd.engine import Evaluator, Scope
from diagnosd.engine.early import EarlyJudge
from diagnosd.errors import SourceError, SourceTimeout
from diagnosd.findings.model import Diagnosis, Verdict
from diagnosd.sources.base import Sample, Samples
from diagnosd.trees.model import Tree
from tests.engine.fakes import FakeSource
from tests.engine.test_evaluator import AT, TEXT, check, conclusion

PODS = [f"p{i}" for i in range(7)]


# --- a source whose answers arrive in an order a seed decides --------------------------------


def metric(i: int) -> str:
    return f"mx{i:02d}_q"  # no name is a substring of another


class Ordered(FakeSource):
    """FakeSource whose every (metric, time) answers after `turns` turns of the event loop."""

    def __init__(self, answers: dict[str, Any], turns: Callable[[str, datetime], int], **kw: Any) -> None:
        super().__init__(answers, **kw)
        self.turns = turns

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        for _ in range(self.turns(promql, at)):
            await asyncio.sleep(0)
        return await super().query(promql, at)


def shuffled(seed: int) -> Callable[[str, datetime], int]:
    def turns(promql: str, at: datetime) -> int:
        return random.Random(f"{seed}|{promql}|{at.isoformat()}").randrange(0, 12)

    return turns


async def both(tree: Tree, make: Callable[[], FakeSource], scope: Scope | None = None, **kw: Any) -> tuple[Any, Any]:
    """The reference's diagnosis (nothing judged early) and the engine's, each on a fresh source."""
    with mock.patch.object(EarlyJudge, "ready", return_value=None):
        walked = await Evaluator(make(), **kw).diagnose(tree, scope, AT)
    return walked, await Evaluator(make(), **kw).diagnose(tree, scope, AT)


def pods(values: dict[str, float | None], warnings: tuple[str, ...] = ()) -> list[Sample]:
    out = [Sample({"namespace": "prod", "pod": p}, v) for p, v in values.items() if v is not None]
    return Samples(out, warnings) if warnings else out


# --- 1. a hand-made tree with every feature, in many orders ------------------------------------


def q(i: int, wrap: str = "max by ($target) ({})") -> str:
    return wrap.format(metric(i))


def every_feature_tree() -> Tree:
    def on(i: int, id_: str, compare: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return check(id_, metric(i), compare, **extra)

    return Tree.model_validate(
        {
            "id": "every_feature",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "params": {"floor": {"default": 0.5, "doc": "d"}},
            "detect": {
                "title": TEXT,
                "any": [on(0, "hi", {"above": 10}), on(1, "grew", {"ratio_above": 2, "baseline": "1d"})],
                "context": [{"id": "temp", "title": TEXT, "query": q(2)}],
            },
            "traffic": {"query": q(3, "sum by ($target) ({})"), "min": "$floor"},
            "nodes": [
                on(
                    4,
                    "gated",
                    {"ratio_above": 1.5, "baseline": "1h"},
                    needs_traffic=True,
                    conclusion=conclusion("gated_cause"),
                    children=[on(5, "under_gated", {"above": 1}, conclusion=conclusion("under_gated_cause"))],
                ),
                on(
                    6,
                    "zeroed",
                    {"below": 1},
                    absent_as_zero=True,
                    conclusion=conclusion("zeroed_cause"),
                    children=[
                        {
                            "id": "grp",
                            "title": TEXT,
                            "group": True,
                            "children": [
                                on(
                                    7,
                                    "under_zero",
                                    {"above": 5},
                                    absent_as_zero=True,
                                    conclusion=conclusion("under_zero_cause"),
                                ),
                                {"id": "hand", "title": TEXT, "manual": TEXT, "conclusion": conclusion("by_hand")},
                            ],
                        }
                    ],
                ),
                {
                    "id": "nested",
                    "title": TEXT,
                    "all": [
                        on(8, "held", {"above": 3}, sustained={"for": "10m", "share": 0.8}),
                        {
                            "id": "either",
                            "title": TEXT,
                            "any": [on(9, "lo", {"below": 2}), on(10, "delta", {"delta_above": 1, "baseline": "1d"})],
                        },
                    ],
                    "context": [{"id": "ctx", "title": TEXT, "query": q(11)}],
                    "conclusion": conclusion("nested_cause"),
                    "children": [
                        {
                            "id": "manual_mid",
                            "title": TEXT,
                            "manual": TEXT,
                            "children": [
                                on(12, "under_manual", {"above": 0}, conclusion=conclusion("under_manual_cause"))
                            ],
                        }
                    ],
                },
                on(13, "fleetwide", {"above": 1}, query=q(13, "sum({})"), conclusion=conclusion("fleet_cause")),
                on(
                    14,
                    "broken",
                    {"above": 1},
                    conclusion=conclusion("broken_cause"),
                    children=[on(15, "under_broken", {"above": 1})],
                ),
                on(16, "partial", {"above": 50}, conclusion=conclusion("partial_cause")),
                on(
                    17,
                    "young",
                    {"above": 0.1},
                    query=q(17, "max by ($target) (rate({}[2h]))"),
                    conclusion=conclusion("young_cause"),
                ),
                on(18, "gone", {"above": 1}, conclusion=conclusion("gone_cause")),
            ],
        }
    )


def every_feature_answers() -> dict[str, Any]:
    def by_time(now: dict[str, float | None], then: dict[str, float | None]) -> Callable[[datetime], Any]:
        return lambda at: pods(now if at == AT else then)

    return {
        metric(0): pods({"p0": 20, "p1": 5, "p2": 30, "p3": 1, "p4": 11, "p5": 12}),
        metric(1): by_time({"p1": 9, "p3": 1, "p6": 8}, {"p1": 3, "p3": 1, "p6": 1}),
        metric(2): pods({"p0": 70, "p2": float("nan"), "p4": 71}),
        metric(3): pods({"p0": 3, "p1": 0.1, "p2": 2, "p4": 9, "p5": 1, "p6": 1}),
        metric(4): by_time({"p0": 3, "p1": 3, "p2": 1, "p4": 3, "p5": 3}, {"p0": 1, "p1": 1, "p2": 1, "p4": 1}),
        metric(5): pods({"p0": 2, "p1": 2, "p2": 2, "p4": 0.5, "p5": 2, "p6": 9}),
        metric(6): pods({"p0": 3, "p2": 0.5, "p3": 7}),  # the rest: absent, read as 0 -> matched
        metric(7): pods({"p1": 9, "p4": 2, "p2": 6}),
        metric(8): pods({p: 4.0 for p in PODS[:5]}),
        metric(9): pods({"p0": 1, "p1": 5, "p2": 1}),
        metric(10): by_time({"p1": 9, "p3": 2, "p4": 5}, {"p1": 1, "p3": 2}),
        metric(11): pods({"p0": 1.5, "p1": 2.5}),
        metric(12): pods({p: 1.0 for p in PODS}),
        metric(13): [Sample({}, 5.0)],
        metric(14): SourceTimeout("took too long", url="http://prometheus"),
        metric(15): pods({"p0": 5}),
        metric(16): pods({"p0": 60, "p1": 10, "p2": 70}, warnings=("store eu-1 down",)),
        metric(17): pods({"p0": 1, "p1": 0.01}),
        # metric(18) has no series on this Prometheus at all
    }


@pytest.mark.parametrize("history", [None, timedelta(minutes=30)], ids=["full-history", "young-tsdb"])
@pytest.mark.parametrize("scope", [None, Scope.of({"pod": "p2"})], ids=["fleet", "one-pod"])
async def test_every_feature_in_many_orders_equals_the_walk_judging_everything(
    history: timedelta | None, scope: Scope | None
) -> None:
    tree = every_feature_tree()
    present = set(every_feature_answers()) - {metric(18)}
    kw = {"history_start": AT - history} if history else {}
    for seed in range(4):
        old, new = await both(
            tree, lambda seed=seed: Ordered(every_feature_answers(), shuffled(seed), present=present), scope, **kw
        )
        assert new == old, f"seed {seed}"
    # The tree exercises what it claims to (checked once, on the last order).
    verdicts = {c.verdict for t in new.targets for c in t.checks}
    assert {Verdict.MATCHED, Verdict.CLEAR, Verdict.SKIPPED, Verdict.UNKNOWN, Verdict.MANUAL} <= verdicts
    assert new.fleet
    assert new.notes


# --- 2. random trees, random answers, random orders ------------------------------------------


class Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.metrics = 0
        self.ids = 0
        self.wrap: dict[int, str] = {}

    def name(self) -> str:
        self.ids += 1
        return f"n{self.ids}"

    def query(self) -> str:
        i = self.metrics
        self.metrics += 1
        wrap = self.r.choice(["max by ($target) ({})"] * 6 + ["sum({})", "max by ($target) (rate({}[2h]))"])
        self.wrap[i] = wrap
        return q(i, wrap)

    def compare(self) -> dict[str, Any]:
        op = self.r.choice(["above", "below", "ratio_above", "ratio_below", "delta_above", "delta_below"])
        out: dict[str, Any] = {op: self.r.choice([0.5, 1, 2, 5])}
        if op.startswith(("ratio", "delta")):
            out["baseline"] = self.r.choice(["1h", "1d"])
        return out

    def conditional(self, depth: int = 0) -> dict[str, Any]:
        if depth < 2 and self.r.random() < 0.3:
            kind = self.r.choice(["all", "any"])
            parts = [
                {"id": self.name(), "title": TEXT, **self.conditional(depth + 1)} for _ in range(self.r.randint(2, 3))
            ]
            return {kind: parts}
        out: dict[str, Any] = {"query": self.query(), "compare": self.compare()}
        if self.r.random() < 0.2:
            out["absent_as_zero"] = True
        if self.r.random() < 0.15:
            out["sustained"] = {"for": "10m", "share": 0.8}
        return out

    def context(self) -> list[dict[str, Any]]:
        return [{"id": self.name(), "title": TEXT, "query": self.query()} for _ in range(self.r.choice([0, 0, 1, 2]))]

    def nodes(self, depth: int, traffic: bool) -> list[dict[str, Any]]:
        out = []
        for _ in range(self.r.randint(1, 3) if depth < 4 else 0):
            kind = self.r.choice(["check"] * 5 + ["group", "manual"])
            id_ = self.name()
            if kind == "group":
                children = self.nodes(depth + 1, traffic) or [{"id": self.name(), "title": TEXT, "manual": TEXT}]
                out.append({"id": id_, "title": TEXT, "group": True, "children": children})
                continue
            node: dict[str, Any] = {"id": id_, "title": TEXT, "children": self.nodes(depth + 1, traffic)}
            if self.r.random() < 0.7:
                node["conclusion"] = conclusion(f"c_{id_}")
            if kind == "manual":
                node["manual"] = TEXT
            else:
                node.update(self.conditional())
                node["context"] = self.context()
                if traffic and self.r.random() < 0.4:
                    node["needs_traffic"] = True
            out.append(node)
        return out

    def tree(self) -> Tree:
        traffic = self.r.random() < 0.5
        spec: dict[str, Any] = {
            "id": "fuzzed",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": {"title": TEXT, **self.conditional(), "context": self.context()},
            "nodes": self.nodes(1, traffic) or [{"id": self.name(), "title": TEXT, "manual": TEXT}],
        }
        if traffic:
            spec["traffic"] = {"query": self.query(), "min": 1}
        return Tree.model_validate(spec)

    def value(self) -> float | None:
        return self.r.choice([None, None, 0.0, 0.4, 1.0, 1.5, 3.0, 6.0, float("nan"), float("inf")])

    def answer(self, i: int) -> Any:
        roll = self.r.random()
        if roll < 0.07:
            return SourceTimeout(f"slow {i}", url="http://prometheus")
        if roll < 0.12:
            return SourceError(f"bad {i}", url="http://prometheus")
        if roll < 0.2 or self.wrap[i].startswith("sum("):
            return [Sample({}, self.r.choice([0.0, 2.0, 9.0]))]
        warnings = ("store down",) if self.r.random() < 0.1 else ()
        if self.r.random() < 0.4:
            now = {p: self.value() for p in PODS}
            then = {p: self.value() for p in PODS}
            return lambda at: pods(now if at == AT else then, warnings)
        return pods({p: self.value() for p in PODS}, warnings)

    def answers(self) -> tuple[dict[str, Any], set[str]]:
        answers = {metric(i): self.answer(i) for i in range(self.metrics)}
        present = {m for m in answers if self.r.random() > 0.08}
        return answers, present


@pytest.mark.parametrize("block", range(2))
async def test_random_trees_and_orders_equal_the_walk_judging_everything(block: int) -> None:
    for seed in range(block * 6, block * 6 + 6):
        gen = Gen(seed)
        tree = gen.tree()
        answers, present = gen.answers()
        history = gen.r.choice([None, AT - timedelta(minutes=30)])
        scope = gen.r.choice([None, None, Scope.of({"pod": "p3"})])
        order = shuffled(seed)
        make = lambda answers=answers, order=order, present=present: Ordered(answers, order, present=present)  # noqa: E731
        old, new = await both(tree, make, scope, history_start=history)
        assert new == old, f"seed {seed}"


# --- 3. robustness: cancellation, errors ------------------------------------------------------


class Hanging(FakeSource):
    """Queries of `slow` hang until cancelled; each records its cleanup, which takes a turn."""

    def __init__(self, answers: dict[str, Any], slow: str) -> None:
        super().__init__(answers)
        self.slow = slow
        self.started = 0
        self.cleaned = 0

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        if self.slow in promql:
            self.started += 1
            try:
                await asyncio.sleep(30)
            finally:
                for _ in range(3):
                    await asyncio.sleep(0)  # closing the connection
                self.cleaned += 1
        return await super().query(promql, at)


def two_level_tree() -> Tree:
    return Tree.model_validate(
        {
            "id": "small",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": {"title": TEXT, "query": q(0), "compare": {"above": 1}},
            "nodes": [
                {"id": "a", "title": TEXT, "query": q(1), "compare": {"above": 1}, "conclusion": conclusion("ca")},
                {"id": "b", "title": TEXT, "query": q(2), "compare": {"above": 1}, "conclusion": conclusion("cb")},
                {"id": "c", "title": TEXT, "query": q(3), "compare": {"above": 1}, "conclusion": conclusion("cc")},
            ],
        }
    )


def small_answers() -> dict[str, Any]:
    return {metric(i): pods({"p0": 5.0, "p1": 0.5}) for i in range(4)}


def others() -> set[asyncio.Task[Any]]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def cancel(how: str, evaluator: Any) -> None:
    """Cancels a diagnosis the three ways a caller does: wait_for, a timeout scope, Task.cancel."""
    diagnosis = evaluator.diagnose(two_level_tree(), at=AT)
    if how == "wait_for":
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(diagnosis, timeout=0.01)
    elif how == "timeout":
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.01):
                await diagnosis
    else:
        task = asyncio.ensure_future(diagnosis)
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize("how", ["wait_for", "timeout", "cancel"])
async def test_a_cancelled_diagnosis_has_ended_its_queries_when_it_returns(how: str) -> None:
    """No query of a cancelled diagnosis is still running once the cancellation has reached its
    caller (cancel() alone would leave them to end some turns of the loop later, unobserved)."""
    source = Hanging(small_answers(), slow=metric(2))
    evaluator = Evaluator(source)
    before = others()
    await cancel(how, evaluator)
    assert source.started == 1
    assert source.cleaned == 1, "the diagnosis returned while its cancelled query was still running"
    assert others() - before == set()


@pytest.mark.parametrize("how", ["wait_for", "timeout", "cancel"])
async def test_a_diagnosis_cancelled_leaves_no_query_running_a_few_turns_later(how: str) -> None:
    """Cancelled queries have ended, and stay ended, at the next turns of the loop (no leak)."""
    source = Hanging(small_answers(), slow=metric(2))
    evaluator = Evaluator(source)
    before = others()
    await cancel(how, evaluator)
    for _ in range(10):
        await asyncio.sleep(0)
    assert source.cleaned == source.started == 1
    assert others() - before == set()


class Exploding(FakeSource):
    """`boom` metrics raise a plain exception (a bug, not a SourceError) at the same turn."""

    def __init__(self, answers: dict[str, Any], boom: tuple[str, ...]) -> None:
        super().__init__(answers)
        self.boom = boom

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        await asyncio.sleep(0)
        if any(b in promql for b in self.boom):
            raise RuntimeError(f"bug in {promql}")
        return await super().query(promql, at)


async def test_an_exception_other_than_a_source_error_propagates() -> None:
    source = Exploding(small_answers(), boom=(metric(2),))
    with pytest.raises(RuntimeError, match="bug in"):
        await Evaluator(source).diagnose(two_level_tree(), at=AT)
    for _ in range(3):
        await asyncio.sleep(0)


async def test_two_failing_queries_leave_no_unretrieved_task_exception() -> None:
    """Two queries raising at once: one exception propagates, the other must not end up in the
    loop's 'Task exception was never retrieved' (gather marks it retrieved)."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        source = Exploding(small_answers(), boom=(metric(1), metric(2), metric(3)))
        evaluator = Evaluator(source)
        with pytest.raises(RuntimeError, match="bug in"):
            await evaluator.diagnose(two_level_tree(), at=AT)
        for _ in range(5):
            await asyncio.sleep(0)
        del evaluator, source
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(previous)
    assert [c.get("message") for c in reported] == []


# --- 4. the early path really is taken in these tests -----------------------------------------


async def test_the_early_verdicts_are_what_the_walk_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards the tests above: with the early verdicts there, the walk does not judge checks."""
    import diagnosd.engine.walk as walk

    calls: list[tuple[str, tuple[str, ...]]] = []
    original = walk.judge

    def counting(question: Any, key: Any, context: Any = None) -> Any:
        calls.append((question.id, key))
        return original(question, key, context)

    monkeypatch.setattr(walk, "judge", counting)
    present = set(every_feature_answers()) - {metric(18)}
    diagnosis: Diagnosis = await Evaluator(Ordered(every_feature_answers(), shuffled(1), present=present)).diagnose(
        every_feature_tree(), at=AT
    )
    assert diagnosis.targets
    # Only what no answer of the check named is judged by the walk (absent-as-zero pods, the fleet
    # check, the errored one), never a check whose answers named the pod.
    named = [("detect", ("prod", p)) for p in ("p0", "p1", "p2", "p3")] + [("partial", ("prod", "p0"))]
    assert calls
    assert not set(named) & set(calls)
    assert ("zeroed", ("prod", "p1")) in calls  # absent, read as 0: named by no answer


# --- 5. compose: the heap frozen at startup ----------------------------------------------------


async def test_garbage_left_from_startup_is_collected_not_frozen(tmp_path: Path) -> None:
    """gc.freeze() moves everything the collector tracks, garbage included, out of its reach for
    the daemon's lifetime: cycles left over from startup (rules, settings, validators built and
    dropped) are never freed unless a gc.collect() precedes the freeze."""
    from diagnosd.daemon import compose
    from tests.serving import build, settings

    class Cycle:
        pass

    cycle = Cycle()
    cycle.me = cycle  # type: ignore[attr-defined]
    dead = weakref.ref(cycle)
    gc.collect()  # still alive: promoted to the oldest generation
    del cycle  # garbage now, that only a full collection frees
    async with compose.open_services(build(settings("http://127.0.0.1:9", tmp_path))):
        gc.collect()
        alive_while_up = dead() is not None
    gc.collect()
    assert dead() is None  # the control: it was garbage, freed once the heap is unfrozen
    assert not alive_while_up, "a startup cycle was frozen: it lives as long as the daemon"
