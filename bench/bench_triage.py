"""Benchmark: `diagnosd triage` (every shipped tree) over fleets of N engine pods on a real Prometheus.

Run: python bench/bench_triage.py [N ...]   (default 10 100 1000; needs prometheus and promtool on PATH)
Prints, side by side in one run, the queries sent, the symptoms present and the wall time for each N,
and both as a ratio to the smallest N: the queries stay the same, the time grows with what
Prometheus itself has to read, not with a query per target.
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
from diagnosd.findings.triage import Board
from diagnosd.promlocal import LocalPrometheus, backfill
from diagnosd.promlocal.openmetrics import Series, write
from diagnosd.sources import PrometheusConfig

AT = datetime(2026, 2, 1, 12, tzinfo=UTC)
TTFT = {"0.1": 50, "0.5": 90, "1.0": 100, "+Inf": 100}
ITL = {"0.01": 500, "0.05": 950, "0.1": 1000, "+Inf": 1000}


def minutes() -> list[datetime]:
    """Half an hour a day before AT and the half hour up to AT, one sample a minute."""
    day_ago = [AT - timedelta(days=1, minutes=m) for m in range(30, -1, -1)]
    return day_ago + [AT - timedelta(minutes=m) for m in range(30, -1, -1)]


def gauge(name: str, labels: dict[str, str], value: float) -> Series:
    return Series(name, labels, [(t.timestamp(), value) for t in minutes()])


def counter(name: str, labels: dict[str, str], per_minute: float) -> Series:
    start = minutes()[0]
    return Series(name, labels, [(t.timestamp(), per_minute * (t - start).total_seconds() / 60) for t in minutes()])


def fleet(pods: int) -> list[Series]:
    """Every 10th pod backs up in its queue, every 20th of them on a full KV pool; the rest healthy."""
    out: list[Series] = []
    for i in range(pods):
        labels = {"namespace": "prod", "pod": f"vllm-{i}", "model_name": "llama"}
        out.append(gauge("vllm:num_requests_waiting", labels, 25 if i % 10 == 0 else 1))
        out.append(gauge("vllm:kv_cache_usage_perc", labels, 0.97 if i % 20 == 0 else 0.4))
        out.append(gauge("vllm:num_requests_running", labels, 8))
        out.append(counter("vllm:prefix_cache_hits_total", labels, 800))
        out.append(counter("vllm:prefix_cache_queries_total", labels, 1000))
        out.append(counter("vllm:request_success_total", {**labels, "finished_reason": "stop"}, 100))
        for name, buckets in (("vllm:time_to_first_token_seconds", TTFT), ("vllm:inter_token_latency_seconds", ITL)):
            for le, per_minute in buckets.items():
                out.append(counter(f"{name}_bucket", {**labels, "le": le}, per_minute))
    return out


async def measure(url: str, rules: compose.Rules) -> tuple[int, float, Board]:
    counter = QueryCounter()
    async with compose.diagnoser(PrometheusConfig(url=url, timeout=60.0), rules, wrap=counter.wrap) as diagnoser:
        await diagnoser.triage(Scope(), AT)  # warm Prometheus' caches
        counter.queries = 0
        start = time.perf_counter()
        board = await diagnoser.triage(Scope(), AT)
        return counter.queries, time.perf_counter() - start, board


def main(sizes: list[int]) -> None:
    columns = ("targets", "queries", "ratio", "present", "hits", "time", "ratio")
    widths = (8, 8, 7, 8, 6, 9, 7)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    rules = compose.load()  # once: every N is triaged with the same trees
    first: tuple[int, float] | None = None
    for pods in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            with (work / "s.om").open("w") as out:
                write(out, fleet(pods))
            backfill(work / "s.om", work / "tsdb")
            with LocalPrometheus(work, tsdb=work / "tsdb") as prom:
                queries, seconds, board = asyncio.run(measure(prom.url, rules))
        first = first or (queries, seconds)
        hits = sum(len(p.hits) for p in board.present)
        print(
            f"{pods:>8} {queries:>8} {queries / first[0]:>6.1f}x {len(board.present):>8} {hits:>6} "
            f"{seconds * 1000:>7.0f}ms {seconds / first[1]:>6.1f}x"
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [10, 100, 1000])
