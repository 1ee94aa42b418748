"""A TSDB younger than a query's window: that query is unknown (short history), never judged.

A 10m rate over 10 s of samples is a sixtieth of the truth, so on a Prometheus started a moment
ago every rate reads "QPS low" and every gauge average is taken over almost nothing.
"""

from __future__ import annotations

from datetime import timedelta

from diagnosd.engine import Evaluator
from diagnosd.findings import Reason, Verdict
from diagnosd.trees import promql
from diagnosd.trees.model import Tree
from tests.engine.fakes import FakeSource, samples
from tests.engine.test_evaluator import AT, check, conclusion, make_tree


def test_reach_is_the_longest_range_or_offset_plus_every_subquery_window() -> None:
    def reach(text: str) -> timedelta:
        return promql.reach(promql.parse(text))

    assert reach("x") == timedelta(0)
    assert reach("rate(x[10m])") == timedelta(minutes=10)
    assert reach("rate(x[10m] offset 1h) / rate(y[5m])") == timedelta(hours=1, minutes=10)
    assert reach("x offset 1d") == timedelta(days=1)
    assert reach("quantile_over_time(0.2, (rate(x[2m]))[5m:1m])") == timedelta(minutes=7)


def _tree() -> Tree:
    return make_tree(
        check("kv", "kv", {"above": 0.9}, conclusion=conclusion("kv_full")),
        check("busy", "avg_over_time(busy[10m])", {"above": 0.5}, conclusion=conclusion("busy")),
        check("grew", "rate(done[10m])", {"ratio_above": 2, "baseline": "1d"}, conclusion=conclusion("grew")),
    )


def _source() -> FakeSource:
    pods = {"vllm-0": 30.0}
    return FakeSource(
        {
            "waiting": samples(pods),
            "kv": samples({"vllm-0": 0.95}),
            "busy": samples({"vllm-0": 0.9}),
            "done": lambda at: samples({"vllm-0": 5.0}) if at == AT else [],
        }
    )


async def test_a_window_longer_than_the_history_is_unknown_with_what_it_needs() -> None:
    evaluator = Evaluator(_source(), history_start=AT - timedelta(seconds=40))
    (target,) = (await evaluator.diagnose(_tree(), at=AT)).targets
    checks = {c.id: c for c in target.checks}
    assert checks["kv"].verdict is Verdict.MATCHED  # an instant gauge needs no history
    assert checks["busy"].verdict is Verdict.UNKNOWN
    assert checks["busy"].reason is Reason.SHORT_HISTORY
    assert checks["busy"].detail == "Prometheus holds 40s of history; this query reads 10m"
    assert checks["grew"].verdict is Verdict.UNKNOWN
    assert [c.cause for c in target.root_causes] == ["kv_full"]


async def test_enough_history_judges_as_before() -> None:
    evaluator = Evaluator(_source(), history_start=AT - timedelta(hours=2))
    (target,) = (await evaluator.diagnose(_tree(), at=AT)).targets
    checks = {c.id: c for c in target.checks}
    assert checks["busy"].verdict is Verdict.MATCHED
    assert checks["grew"].reason is Reason.NO_BASELINE  # two hours hold no day-old baseline
    assert {c.cause for c in target.root_causes} == {"kv_full", "busy"}


async def test_without_a_known_start_nothing_is_marked() -> None:
    (target,) = (await Evaluator(_source()).diagnose(_tree(), at=AT)).targets
    assert {c.id: c.verdict for c in target.checks}["busy"] is Verdict.MATCHED
