"""Benchmark: the daemon's scheduler round, triage and each tree's overhead over fleets of N engine pods.

Run: python bench/harness.py [N ...] [--repeats R]   (default 10 100 1000, 5 repeats; needs
prometheus and promtool on PATH). For each N the fleet (bench/fleet.py: the simulator's history,
N pods with their GPUs, nodes and a gateway, one pod with a full KV pool) is backfilled into a
real Prometheus, then measured in a fresh process, so that its peak RSS is that N's:

- asked / sent: instant queries the trees asked in one scheduler round (the real
  `Scheduler.run_round` of `compose.open_services`) and those that reached Prometheus;
- round: median wall time of a round, and its ratio to the first N;
- prom cpu: the CPU seconds Prometheus itself spent per round (its process_cpu_seconds_total
  across the measured rounds, over their number): over the machine's cores, the floor no client
  can take a round under;
- triage: queries and median wall time of `Diagnoser.triage` (every tree), and its ratio;
- rss: the measuring process's peak resident set (getrusage ru_maxrss), MiB;
- json: the share of a round's wall time spent in json.loads of Prometheus' answers (cProfile);
- overhead: per tree, the wall time of its diagnosis over the slowest of its requests when all
  of them are sent again concurrently, in the same run (the slowest request is the floor): the
  median over repeats; the table shows the worst tree, `overheads` every tree.

Prints one table (rows: N) and the per-tree overheads.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import math
import multiprocessing
import pstats
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext
from pathlib import Path

import httpx
from common import QueryCounter, Recorder, counted_runtime  # bench/: run as `python bench/NAME.py`
from fleet import ANCHOR, save, simulate, write
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from diagnosd.daemon import compose
from diagnosd.daemon.diagnoser import Diagnoser
from diagnosd.engine import Scope
from diagnosd.findings.lifecycle import Trigger
from diagnosd.promlocal import LocalPrometheus, backfill
from diagnosd.trees import Tree

# promtool's block length under backfill's 72 h cap: its largest range that fits, 2 h x 3^3.
BLOCK = 54 * 3600
COLUMNS = (
    *("pods", "series", "asked", "sent", "round", "ratio", "prom cpu"),
    *("triage q", "triage", "ratio", "rss", "json", "overhead"),
)


@dataclass(frozen=True)
class Row:
    pods: int
    series: int
    asked: int
    sent: int
    round_seconds: float
    prometheus_cpu: float  # Prometheus' CPU seconds per round
    triage_queries: int
    triage_seconds: float
    rss_mib: float
    json_share: float
    overheads: dict[str, float] = field(default_factory=dict)  # per tree

    @property
    def worst(self) -> tuple[str, float]:
        return max(self.overheads.items(), key=lambda item: item[1])


def run(sizes: Sequence[int], repeats: int = 5, workdir: Path | None = None) -> list[Row]:
    """Build, backfill and measure every fleet size; returns a row per size."""
    spawn = multiprocessing.get_context("spawn")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="diagnosd-bench-", dir=workdir) as tmp:
        work = Path(tmp)
        with ProcessPoolExecutor(1, mp_context=spawn) as one:
            span = one.submit(_simulate, work / "template.pickle").result()
        for pods in sizes:
            here = work / f"n{pods}"
            here.mkdir()
            series = _build(pods, work / "template.pickle", span, here, spawn)
            # A fresh process per N: ru_maxrss is the peak of the process's whole life.
            with LocalPrometheus(here, tsdb=here / "tsdb") as prom, ProcessPoolExecutor(1, mp_context=spawn) as one:
                row = one.submit(_measure, prom.url, here, pods, series, repeats).result()
            rows.append(row)
            print(_line(row, rows[0]), flush=True)
    return rows


def _simulate(path: Path) -> tuple[float, float]:
    """The template, saved for the fleets; returns the first and the last sample time."""
    template = simulate()
    save(template, path)
    times = [t for points in template.series.values() for t in (points[0][0], points[0][-1]) if len(points[0])]
    return min(times), max(times)


def _build(pods: int, template: Path, span: tuple[float, float], here: Path, spawn: SpawnContext) -> int:
    """Write and backfill the fleet one block window at a time, two at once (two cores), each file
    removed once backfilled (a fleet of 1000 is some 30 GB of OpenMetrics). promtool cuts blocks
    at multiples of BLOCK since the epoch, so a file per window makes the very blocks one file
    would: none overlap, and Prometheus has nothing to compact while it is measured."""
    first = math.floor(span[0] / BLOCK) * BLOCK
    windows = [(start, start + BLOCK) for start in range(int(first), int(span[1]) + 1, BLOCK)]
    windows.reverse()  # the newest, densest window first: the longest job starts first
    with ProcessPoolExecutor(min(len(windows), 2), mp_context=spawn) as pool:
        futures = [pool.submit(_write_and_backfill, pods, template, here, i, w) for i, w in enumerate(windows)]
        series = max(f.result() for f in futures)
    (here / "tsdb").mkdir()
    for part in range(len(windows)):
        for block in (here / f"tsdb{part}").iterdir():
            block.rename(here / "tsdb" / block.name)
    return series


def _write_and_backfill(pods: int, template: Path, here: Path, part: int, window: tuple[float, float]) -> int:
    built = write(pods, template, here / f"fleet{part}.om", window)
    backfill(here / f"fleet{part}.om", here / f"tsdb{part}")
    (here / f"fleet{part}.om").unlink()
    return built.series


def _measure(url: str, here: Path, pods: int, series: int, repeats: int) -> Row:
    return asyncio.run(_measured(url, here, pods, series, repeats))


async def _measured(url: str, here: Path, pods: int, series: int, repeats: int) -> Row:
    counter = QueryCounter()
    registry = CollectorRegistry()
    runtime = counted_runtime(url, here / "findings.db", counter, ANCHOR, registry)
    async with compose.open_services(runtime) as services:
        await services.scheduler.run_round()  # warm Prometheus' caches and the store
        rounds, asked, sent = [], 0, 0
        cpu = await _prometheus_cpu(url)
        for _ in range(repeats):
            before, counter.queries = _asked(registry), 0
            result = await services.scheduler.run_round()
            rounds.append(result.seconds)
            asked, sent = int(_asked(registry) - before), counter.queries
        prometheus_cpu = (await _prometheus_cpu(url) - cpu) / repeats
        triages = []
        for _ in range(repeats):
            counter.queries = 0
            start = time.perf_counter()
            await services.diagnoser.triage(Scope(), ANCHOR)
            triages.append(time.perf_counter() - start)
        triage_queries = counter.queries
        json_share = await _json_share(services.scheduler.run_round)
        overheads = {
            tree.id: statistics.median([await _overhead(services.diagnoser, tree) for _ in range(repeats)])
            for tree in services.scheduler.trees()
        }
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return Row(
        pods,
        series,
        asked,
        sent,
        statistics.median(rounds),
        prometheus_cpu,
        triage_queries,
        statistics.median(triages),
        rss,
        json_share,
        overheads,
    )


async def _prometheus_cpu(url: str) -> float:
    """Prometheus' own process_cpu_seconds_total, from its /metrics."""
    async with httpx.AsyncClient(timeout=30) as client:
        text = (await client.get(f"{url}/metrics")).text
    for family in text_string_to_metric_families(text):
        if family.name == "process_cpu_seconds":
            return float(family.samples[0].value)
    raise RuntimeError(f"{url}/metrics has no process_cpu_seconds_total")


def _asked(registry: CollectorRegistry) -> float:
    """Instant queries the diagnoses asked (the daemon's own meter, above the round's memo)."""
    return registry.get_sample_value("diagnosd_prometheus_queries_total", {"endpoint": "query"}) or 0.0


async def _json_share(round_: Callable[[], Awaitable[object]]) -> float:
    profile = cProfile.Profile()
    start = time.perf_counter()
    profile.enable()
    await round_()
    profile.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    decoding = sum(
        entry[3] for (path, _, name), entry in stats.items() if name == "loads" and path.endswith("json/__init__.py")
    )
    return float(decoding / wall)


async def _overhead(diagnoser: Diagnoser, tree: Tree) -> float:
    """The diagnosis' wall time over its slowest request, all its requests sent again at once."""
    recorder = Recorder(diagnoser.source)
    start = time.perf_counter()
    await diagnoser.diagnose(tree, Scope(), ANCHOR, Trigger.CLI, source=recorder)
    wall = time.perf_counter() - start
    slowest = max(await asyncio.gather(*(call() for call in recorder.replays())), default=0.0)
    return wall / slowest if slowest else float("nan")


def _line(row: Row, first: Row) -> str:
    name, worst = row.worst
    cells = (
        f"{row.pods}",
        f"{row.series}",
        f"{row.asked}",
        f"{row.sent}",
        f"{row.round_seconds * 1000:.0f}ms",
        f"{row.round_seconds / first.round_seconds:.1f}x",
        f"{row.prometheus_cpu * 1000:.0f}ms",
        f"{row.triage_queries}",
        f"{row.triage_seconds * 1000:.0f}ms",
        f"{row.triage_seconds / first.triage_seconds:.1f}x",
        f"{row.rss_mib:.0f}MiB",
        f"{100 * row.json_share:.1f}%",
        f"{worst:.2f} {name}",
    )
    return " ".join(f"{c:>10}" for c in cells)


def table(rows: Sequence[Row]) -> list[str]:
    lines = [" ".join(f"{c:>10}" for c in COLUMNS)]
    lines += [_line(row, rows[0]) for row in rows]
    lines += ["", "overheads " + " ".join(f"{row.pods:>8}" for row in rows)]
    for tree in sorted(rows[0].overheads):
        lines.append(f"{tree:<26}" + " ".join(f"{row.overheads.get(tree, float('nan')):>8.2f}" for row in rows))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[10, 100, 1000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    started = time.monotonic()
    print(" ".join(f"{c:>10}" for c in COLUMNS), flush=True)
    rows = run(args.sizes, args.repeats)
    print(f"\n{time.monotonic() - started:.0f} s in all\n")
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
