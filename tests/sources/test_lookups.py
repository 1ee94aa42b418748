"""The lookup cache: which names exist and what targets declare are asked once per `ttl`, queries never cached."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from diagnosd.errors import SourceTimeout
from diagnosd.sources.base import Sample
from diagnosd.sources.lookups import LookupCache
from tests.conftest import StartPrometheus
from tests.serving import AT, build, fleet, serve, settings

HOUR = timedelta(hours=1)


class Inner:
    """Records what reached it; `present` and `declared` are what it answers."""

    def __init__(self) -> None:
        self.present = {"vllm:num_requests_waiting"}
        self.declared: dict[str, str] | None = {"litellm_deployment_failure_responses_total": "counter"}
        self.names: list[tuple[frozenset[str], datetime]] = []
        self.types: list[frozenset[str]] = []
        self.queries = 0
        self.fail = False

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.queries += 1
        return [Sample({}, 1.0)]

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        self.names.append((frozenset(candidates), end))
        if self.fail:
            raise SourceTimeout("timed out", url="http://prometheus")
        return set(candidates) & self.present

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        self.types.append(frozenset(names))
        if self.declared is None:
            return None
        return {n: t for n, t in self.declared.items() if n in names}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


CANDIDATES = {"vllm:num_requests_waiting", "sglang:num_queue_reqs"}


async def test_names_are_asked_once_within_the_ttl_and_again_after() -> None:
    inner, clock = Inner(), Clock()
    cache = LookupCache(inner, timedelta(seconds=30), clock=clock)
    first = await cache.metric_names(CANDIDATES, AT - HOUR, AT)
    clock.now += 20
    # "Now" has moved by 20 s: the same window, shifted, is the same answer.
    later = AT + timedelta(seconds=20)
    again = await cache.metric_names(CANDIDATES, later - HOUR, later)
    assert first == again == {"vllm:num_requests_waiting"}
    assert len(inner.names) == 1
    clock.now += 11  # 31 s since asked
    inner.present.add("sglang:num_queue_reqs")
    assert await cache.metric_names(CANDIDATES, later - HOUR, later) == CANDIDATES
    assert len(inner.names) == 2


async def test_another_window_scope_or_candidate_set_is_another_question() -> None:
    inner = Inner()
    cache = LookupCache(inner, timedelta(seconds=30), clock=Clock())
    await cache.metric_names(CANDIDATES, AT - HOUR, AT)
    await cache.metric_names(CANDIDATES, AT - 2 * HOUR, AT)  # a longer window reaches other series
    await cache.metric_names(CANDIDATES, AT - HOUR, AT, ['cluster="eu-1"'])
    await cache.metric_names({"vllm:num_requests_waiting"}, AT - HOUR, AT)
    a_day_ago = AT - timedelta(days=1)
    await cache.metric_names(CANDIDATES, a_day_ago - HOUR, a_day_ago)  # a post-mortem: its own window
    assert len(inner.names) == 5
    await cache.metric_names(CANDIDATES, AT - HOUR, AT, ['cluster="eu-1"'])
    assert len(inner.names) == 5


async def test_a_failure_is_not_kept() -> None:
    inner = Inner()
    cache = LookupCache(inner, timedelta(seconds=30), clock=Clock())
    inner.fail = True
    with pytest.raises(SourceTimeout):
        await cache.metric_names(CANDIDATES, AT - HOUR, AT)
    inner.fail = False
    assert await cache.metric_names(CANDIDATES, AT - HOUR, AT) == {"vllm:num_requests_waiting"}
    assert len(inner.names) == 2


async def test_declared_types_are_kept_per_name_and_only_stale_ones_asked() -> None:
    inner, clock = Inner(), Clock()
    cache = LookupCache(inner, timedelta(seconds=30), clock=clock)
    counter, other = "litellm_deployment_failure_responses_total", "litellm_deployment_cooled_down_total"
    assert await cache.metadata({counter, other}) == {counter: "counter"}
    clock.now += 10
    inner.declared = {counter: "counter", "new_total": "counter"}
    # Both known (one declared, one not): nothing asked; only the new name reaches the source.
    assert await cache.metadata({counter, other, "new_total"}) == {counter: "counter", "new_total": "counter"}
    assert inner.types == [frozenset({counter, other}), frozenset({"new_total"})]
    clock.now += 25  # the first two are 35 s old
    inner.declared = {other: "counter"}
    assert await cache.metadata({counter, other}) == {other: "counter"}
    assert inner.types[-1] == frozenset({counter, other})


async def test_no_metadata_to_ask_is_none_and_not_kept() -> None:
    inner = Inner()
    inner.declared = None
    cache = LookupCache(inner, timedelta(seconds=30), clock=Clock())
    assert await cache.metadata({"x_total"}) is None
    assert await cache.metadata({"x_total"}) is None
    assert len(inner.types) == 2


async def test_a_zero_ttl_asks_every_time_and_queries_are_never_kept() -> None:
    inner = Inner()
    cache = LookupCache(inner, timedelta(0), clock=Clock())
    for _ in range(2):
        await cache.metric_names(CANDIDATES, AT - HOUR, AT)
        await cache.metadata({"x_total"})
        await cache.query("up", AT)
    assert (len(inner.names), len(inner.types), inner.queries) == (2, 2, 2)


async def test_the_daemon_asks_names_once_for_two_diagnoses(start_prometheus: StartPrometheus, tmp_path: Path) -> None:
    # Against a real Prometheus: the second diagnosis of the same tree and moment sends its queries
    # but none of the lookups; with lookup_ttl 0s it sends them again.
    prom = start_prometheus(fleet(), query_log=True)
    sent: dict[str, int] = {}
    for ttl in ("30s", "0s"):
        config = settings(prom.url, tmp_path / ttl, prometheus={"url": prom.url, "retries": 0, "lookup_ttl": ttl})
        async with serve(build(config)) as (client, _):
            first = (await client.get("/diagnose/queue_backlog")).json()
            before = _requests(prom.url)
            second = (await client.get("/diagnose/queue_backlog")).json()
            sent[ttl] = _requests(prom.url) - before
        assert second["targets"] == first["targets"]
    queries = first["queries"]
    assert sent["30s"] == queries  # the queries only
    assert sent["0s"] > queries  # the queries and the lookups


def _requests(url: str) -> int:
    """Requests Prometheus has answered over HTTP, from its own metrics."""
    text = httpx.get(f"{url}/metrics").text
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("prometheus_http_requests_total{") and "/metrics" not in line
        )
    )
