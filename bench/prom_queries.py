"""Benchmark: where Prometheus' own work in a scheduler round goes, one query at a time.

Run: python bench/prom_queries.py [N] [--fleet DIR] [--top K]   (default N = 1000; needs
prometheus and promtool on PATH). The fleet of N engine pods is built and backfilled as
bench/harness.py builds it (kept in DIR with --fleet, and taken from there when it is already
built). One scheduler round runs through the composition root, every query it sends is logged,
and each distinct (query, moment) is then sent again alone, twice, the faster kept, with
Prometheus' `stats=all`: its wall time and the samples it read (totalQueryableSamples).

Printed: the queries' sum (a round's Prometheus work without concurrency), the share of the K
slowest, and those K with their time and samples. A round can not be faster, over Prometheus' cores,
than this work; the spread says whether one query to rewrite or the whole read (recording rules)
sets it.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
from common import settings  # bench/: run as `python bench/NAME.py`
from fleet import ANCHOR
from harness import _build, _simulate
from prometheus_client import CollectorRegistry

from diagnosd.daemon import compose
from diagnosd.promlocal import LocalPrometheus
from diagnosd.sources import QuerySource
from diagnosd.sources.base import Sample

Job = tuple[str, datetime]


class Logged:
    """Passes every request through; keeps each instant query's (text, moment)."""

    def __init__(self, inner: QuerySource) -> None:
        self._inner = inner
        self.jobs: list[Job] = []

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.jobs.append((promql, at))
        return await self._inner.query(promql, at)

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        return await self._inner.metric_names(candidates, start, end, where)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        return await self._inner.metadata(names)


@dataclass(frozen=True)
class Cost:
    seconds: float
    samples: int | None
    query: str


def fleet(pods: int, root: Path) -> Path:
    """The fleet's directory under `root`, built and backfilled unless it is there already."""
    here = root / f"n{pods}"
    if (here / "tsdb").is_dir():
        return here
    spawn = multiprocessing.get_context("spawn")
    here.mkdir(parents=True, exist_ok=True)
    span = _simulate(root / "template.pickle")
    _build(pods, root / "template.pickle", span, here, spawn)
    return here


async def round_jobs(url: str, here: Path) -> list[Job]:
    """The (query, moment) pairs one round sends, after a warm-up round."""
    logged: list[Logged] = []
    measured = settings(url, here / "queries.db")

    @asynccontextmanager
    async def source() -> AsyncIterator[QuerySource]:
        async with compose.prometheus_source(measured.prometheus.config()) as inner:
            logged.append(Logged(inner))
            yield logged[-1]

    runtime = compose.build(measured, registry=CollectorRegistry(), clock=lambda: ANCHOR, source=source)
    async with compose.open_services(runtime) as services:
        await services.scheduler.run_round()
        logged[-1].jobs.clear()
        await services.scheduler.run_round()
    return logged[-1].jobs


async def costs(url: str, jobs: Sequence[Job]) -> list[Cost]:
    found: list[Cost] = []
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for query, at in dict.fromkeys(jobs):
            best, samples = float("inf"), None
            for _ in range(2):
                start = time.perf_counter()
                answer = await client.get(
                    "/api/v1/query", params={"query": query, "time": at.timestamp(), "stats": "all"}
                )
                best = min(best, time.perf_counter() - start)
                samples = answer.json().get("data", {}).get("stats", {}).get("samples", {}).get("totalQueryableSamples")
            found.append(Cost(best, samples, query))
    return sorted(found, key=lambda c: c.seconds, reverse=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pods", nargs="?", type=int, default=1000)
    parser.add_argument("--fleet", type=Path, metavar="DIR", help="keep the built fleet here (and reuse it)")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="diagnosd-queries-") as tmp:
        here = fleet(args.pods, args.fleet or Path(tmp))
        with LocalPrometheus(here / "queries", tsdb=here / "tsdb") as prom:
            jobs = asyncio.run(round_jobs(prom.url, here))
            found = asyncio.run(costs(prom.url, jobs))
    total = sum(c.seconds for c in found)
    top = found[: args.top]
    print(f"{args.pods} pods: one round sends {len(jobs)} queries, {len(found)} distinct")
    share = sum(c.seconds for c in top) / total
    print(f"sent one at a time: {total * 1000:.0f} ms in all; the {len(top)} slowest {share:.0%} of it")
    for cost in top:
        print(f"{cost.seconds * 1000:7.0f} ms {cost.samples or 0:>10} samples  {cost.query[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
