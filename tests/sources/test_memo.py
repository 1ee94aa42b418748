"""The round's memo: an identical question is sent once, concurrent askers share it, failures are retried."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from diagnosd.errors import SourceTimeout
from diagnosd.sources.base import Sample, Samples
from diagnosd.sources.memo import MemoSource
from tests.conftest import StartPrometheus
from tests.serving import AT, RULES, build, counted, fleet, serve, settings


class Recorder:
    """An inner source that records what reached it; `gate` holds answers until it is set."""

    def __init__(self, fail: int = 0) -> None:
        self.queries: list[tuple[str, datetime]] = []
        self.names: list[frozenset[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = fail  # this many first queries raise

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.queries.append((promql, at))
        await self.gate.wait()
        if len(self.queries) <= self.fail:
            raise SourceTimeout("timed out", url="http://prometheus", query=promql)
        return Samples([Sample({"pod": "p"}, float(len(self.queries)))], ["partial"])

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        self.names.append(frozenset(candidates))
        return set(candidates)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        return None


async def test_the_same_query_at_the_same_moment_is_sent_once() -> None:
    inner = Recorder()
    memo = MemoSource(inner)
    first = await memo.query("up", AT)
    second = await memo.query("up", AT)
    assert inner.queries == [("up", AT)]
    assert first == second == [Sample({"pod": "p"}, 1.0)]
    assert isinstance(second, Samples)
    assert second.warnings == ("partial",)  # warnings travel with the answer
    assert (memo.asked, memo.sent) == (2, 1)


async def test_another_text_or_moment_is_another_question() -> None:
    inner = Recorder()
    memo = MemoSource(inner)
    await memo.query("up", AT)
    await memo.query("up", AT - timedelta(days=1))
    await memo.query("up == 1", AT)
    assert inner.queries == [("up", AT), ("up", AT - timedelta(days=1)), ("up == 1", AT)]


async def test_concurrent_askers_await_the_one_request_in_flight() -> None:
    inner = Recorder()
    inner.gate.clear()
    memo = MemoSource(inner)
    asking = [asyncio.create_task(memo.query("up", AT)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert inner.queries == [("up", AT)]  # the other two wait for it
    inner.gate.set()
    answers = await asyncio.gather(*asking)
    assert answers == [[Sample({"pod": "p"}, 1.0)]] * 3


async def test_each_asker_gets_its_own_copy() -> None:
    memo = MemoSource(Recorder())
    mine = await memo.query("up", AT)
    mine.clear()
    assert await memo.query("up", AT) == [Sample({"pod": "p"}, 1.0)]


async def test_a_failure_reaches_its_waiters_and_is_then_forgotten() -> None:
    inner = Recorder(fail=1)
    inner.gate.clear()
    memo = MemoSource(inner)
    asking = [asyncio.create_task(memo.query("up", AT)) for _ in range(2)]
    await asyncio.sleep(0.01)
    inner.gate.set()
    errors = await asyncio.gather(*asking, return_exceptions=True)
    assert [type(e) for e in errors] == [SourceTimeout, SourceTimeout]
    # Not an answer: the next asker sends it again and gets the real one.
    assert await memo.query("up", AT) == [Sample({"pod": "p"}, 2.0)]
    assert len(inner.queries) == 2


async def test_one_asker_cancelled_does_not_cancel_the_others_request() -> None:
    inner = Recorder()
    inner.gate.clear()
    memo = MemoSource(inner)
    quitter = asyncio.create_task(memo.query("up", AT))
    stayer = asyncio.create_task(memo.query("up", AT))
    await asyncio.sleep(0.01)
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    inner.gate.set()
    assert await stayer == [Sample({"pod": "p"}, 1.0)]
    assert len(inner.queries) == 1


async def test_name_discovery_is_asked_once_per_set_of_candidates() -> None:
    inner = Recorder()
    memo = MemoSource(inner)
    start = AT - timedelta(hours=1)
    assert await memo.metric_names(["a", "b"], start, AT) == {"a", "b"}
    assert await memo.metric_names(["b", "a"], start, AT) == {"a", "b"}
    assert await memo.metric_names(["a"], start, AT) == {"a"}
    assert inner.names == [frozenset({"a", "b"}), frozenset({"a"})]


# A round on a real Prometheus: kv_hit_low is given a check that queue_backlog also makes (the same
# text, at the round's moment); Prometheus' query log shows what it ran.

SHARED = "max by (namespace, pod) (vllm:kv_cache_usage_perc)"
LOGGED = "max by (namespace, pod)(vllm:kv_cache_usage_perc{})"  # as Prometheus prints it


def shared_rules(where: Path) -> Path:
    shutil.copytree(RULES, where)
    tree = yaml.safe_load((where / "kv_hit_low.yaml").read_text(encoding="utf-8"))
    check = {
        "id": "kv_usage",
        "title": {"zh": "KV", "en": "KV usage"},
        "query": SHARED.replace("namespace, pod", "$target"),
    }
    tree["nodes"].insert(0, {**check, "compare": {"above": 0.9}})
    (where / "kv_hit_low.yaml").write_text(yaml.safe_dump(tree, allow_unicode=True), encoding="utf-8")
    return where


def ran(log: Path) -> list[tuple[str, datetime]]:
    """The instant queries Prometheus evaluated, with their evaluation time."""
    entries = [json.loads(line)["params"] for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [(p["query"], datetime.fromisoformat(p["start"].replace("Z", "+00:00"))) for p in entries]


async def test_a_round_sends_a_query_two_trees_ask_once(start_prometheus: StartPrometheus, tmp_path: Path) -> None:
    prom = start_prometheus(fleet(), query_log=True)
    # Walked whole: both trees ask it for the same scope (narrowed, each tree would ask it for the
    # targets where its own symptom is, the same text only where those are the same).
    rules = str(shared_rules(tmp_path / "rules"))
    config = settings(prom.url, tmp_path, rules_dir=rules, scheduler={"walk": "whole"})
    async with serve(build(config)) as (_, services):
        result = await services.scheduler.run_round()
        asked = counted(services.metrics.queries, endpoint="query")
    assert result.trees == {"queue_backlog": "ok", "kv_hit_low": "ok"}
    assert prom.query_log is not None
    sent = ran(prom.query_log)
    assert sent.count((LOGGED, AT)) == 1
    assert len(sent) == len(set(sent))  # nothing else twice either
    assert asked == len(sent) + 1  # both trees asked it: the daemon's meter counts asks, above the memo
