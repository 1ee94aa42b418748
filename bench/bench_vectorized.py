"""Benchmark: one vectorized diagnosis over N targets vs N per-target diagnoses, on a real Prometheus.

Run: python bench/bench_vectorized.py [N ...]   (needs prometheus and promtool on PATH)
Prints, side by side in one run, queries sent and wall time of both ways, and their ratios.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from common import QueryCounter  # bench/common.py: run as `python bench/NAME.py`

from diagnosd.daemon import compose
from diagnosd.engine import Scope
from diagnosd.findings.lifecycle import Trigger
from diagnosd.promlocal import LocalPrometheus, backfill
from diagnosd.promlocal.openmetrics import Series, write
from diagnosd.sources import PrometheusConfig

RULES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "rules"
AT = datetime(2026, 2, 1, 12, tzinfo=UTC)


def fleet(pods: int) -> list[Series]:
    def points(now: float, before: float) -> list[tuple[float, float]]:
        out = [((AT - timedelta(days=1, minutes=m)).timestamp(), before) for m in range(30, -1, -1)]
        return out + [((AT - timedelta(minutes=m)).timestamp(), now) for m in range(30, -1, -1)]

    series = []
    for i in range(pods):
        labels = {"namespace": "prod", "pod": f"vllm-{i}"}
        series.append(Series("vllm:num_requests_waiting", labels, points(20 if i % 2 else 1, 1)))
        series.append(Series("vllm:kv_cache_usage_perc", labels, points(0.95 if i % 4 == 1 else 0.5, 0.5)))
    return series


async def measure(url: str, pods: int) -> tuple[int, float, int, float]:
    rules = compose.load(RULES)
    tree = rules.ruleset.trees["queue_backlog"]
    counter = QueryCounter()
    async with compose.diagnoser(PrometheusConfig(url=url), rules, wrap=counter.wrap) as diagnoser:
        start = time.perf_counter()
        together = (await diagnoser.diagnose(tree, Scope(), AT, Trigger.CLI)).diagnosis
        vector_time, vector_queries = time.perf_counter() - start, counter.queries
        counter.queries = 0
        start = time.perf_counter()
        found = 0
        for i in range(pods):
            one = (await diagnoser.diagnose(tree, Scope.of({"pod": f"vllm-{i}"}), AT, Trigger.CLI)).diagnosis
            found += sum(bool(t.root_causes) for t in one.targets)
        loop_time, loop_queries = time.perf_counter() - start, counter.queries
    assert found == sum(bool(t.root_causes) for t in together.targets), "both ways must find the same causes"
    return vector_queries, vector_time, loop_queries, loop_time


def main(sizes: list[int]) -> None:
    columns = ("targets", "queries 1x", "queries Nx", "ratio", "time 1x", "time Nx", "ratio")
    widths = (8, 10, 10, 7, 9, 9, 7)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    for pods in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            with (work / "s.om").open("w") as out:
                write(out, fleet(pods))
            backfill(work / "s.om", work / "tsdb")
            with LocalPrometheus(work, tsdb=work / "tsdb") as prom:
                vq, vt, lq, lt = asyncio.run(measure(prom.url, pods))
        print(f"{pods:>8} {vq:>10} {lq:>10} {lq / vq:>6.0f}x {vt * 1000:>7.1f}ms {lt * 1000:>7.0f}ms {lt / vt:>6.1f}x")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 1000])
