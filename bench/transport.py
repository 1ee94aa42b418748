"""Benchmark: the Prometheus client's two transports side by side, aiohttp's pool against httpx's own.

Run: python bench/transport.py [N ...] [--repeats R] [--fleet DIR]   (default N = 10 100, R = 5;
needs prometheus and promtool on PATH). Each fleet is built and backfilled as bench/harness.py
builds it; one Prometheus serves both transports, which take turns, so a noisy machine weighs on
both alike. For each: the scheduler round's wall time, the CPU this process spends diagnosing every
tree once (one after another: what diagnosd itself costs, Prometheus' work excluded), and the
worst tree's overhead (its wall time over its slowest request, as bench/harness.py measures it).
Medians over the repeats; the last column is aiohttp's figure over httpx's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from common import settings  # bench/: run as `python bench/NAME.py`
from fleet import ANCHOR
from harness import _overhead
from prom_queries import fleet
from prometheus_client import CollectorRegistry

from diagnosd.daemon import compose
from diagnosd.engine import Scope
from diagnosd.findings.lifecycle import Trigger
from diagnosd.promlocal import LocalPrometheus
from diagnosd.sources import QuerySource
from diagnosd.sources.prometheus import Stack

STACKS: tuple[Stack, ...] = ("aiohttp", "httpx")
Figures = dict[str, float]


async def measure(url: str, here: Path, stack: Stack, repeats: int) -> list[Figures]:
    measured = settings(url, here / f"{stack}.db")
    config = dataclasses.replace(measured.prometheus.config(), stack=stack)

    @asynccontextmanager
    async def source() -> AsyncIterator[QuerySource]:
        async with compose.prometheus_source(config) as inner:
            yield inner

    runtime = compose.build(measured, registry=CollectorRegistry(), clock=lambda: ANCHOR, source=source)
    found: list[Figures] = []
    async with compose.open_services(runtime) as services:
        await services.scheduler.run_round()  # warm Prometheus' caches, the store and the pool
        trees = services.scheduler.trees()
        for _ in range(repeats):
            start = time.perf_counter()
            await services.scheduler.run_round()
            round_ = time.perf_counter() - start
            cpu = time.process_time()
            for tree in trees:
                await services.diagnoser.diagnose(tree, Scope(), ANCHOR, Trigger.CLI)
            cpu = time.process_time() - cpu
            worst = max([await _overhead(services.diagnoser, tree) for tree in trees])
            found.append({"round": round_, "cpu": cpu, "overhead": worst})
    return found


async def compare(url: str, here: Path, repeats: int) -> dict[Stack, Figures]:
    runs: dict[Stack, list[Figures]] = {stack: [] for stack in STACKS}
    for _ in range(repeats):  # in turns, one repeat each
        for stack in STACKS:
            runs[stack] += await measure(url, here, stack, 1)
    return {stack: {key: statistics.median(r[key] for r in found) for key in found[0]} for stack, found in runs.items()}


def table(rows: dict[int, dict[Stack, Figures]]) -> list[str]:
    lines = [
        "| engine pods | figure | aiohttp | httpx | aiohttp / httpx |",
        "|---:|---|---:|---:|---:|",
    ]
    names = {"round": "round wall (ms)", "cpu": "CPU, 20 trees one by one (ms)", "overhead": "worst overhead"}
    for pods, by_stack in rows.items():
        for key, name in names.items():
            a, h = by_stack["aiohttp"][key], by_stack["httpx"][key]
            shown = [f"{v:.2f}" if key == "overhead" else f"{v * 1000:.0f}" for v in (a, h)]  # a ratio, or ms
            lines.append(f"| {pods} | {name} | {shown[0]} | {shown[1]} | {a / h:.2f} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pods", nargs="*", type=int, default=[10, 100])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fleet", type=Path, metavar="DIR", help="keep the built fleets here (and reuse them)")
    args = parser.parse_args(argv)
    rows: dict[int, dict[Stack, Figures]] = {}
    with tempfile.TemporaryDirectory(prefix="diagnosd-transport-") as tmp:
        for pods in args.pods:
            here = fleet(pods, args.fleet or Path(tmp))
            with LocalPrometheus(here / "transport", tsdb=here / "tsdb") as prom:
                rows[pods] = asyncio.run(compare(prom.url, here, args.repeats))
            print(f"{pods} pods measured", file=sys.stderr)
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
