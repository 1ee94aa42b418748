"""Benchmark: triage's walk over the present targets alone against the walk over the whole scope.

Run: python bench/triage_walk.py [N ...] [--repeats R] [--fleets DIR]   (default 10 1000, 3
repeats; needs prometheus and promtool on PATH). Each fleet is the harness' (bench/fleet.py: N
pods with their GPUs, nodes and a gateway, one pod with a full KV pool), backfilled into a real
Prometheus (kept under --fleets DIR when given, and taken from there the next time). Per N, the
two ways take turns in one process, so that both meet the same noise: `Diagnoser.triage` with the
walk scoped to the targets where the symptom is present (engine/narrowed.py `walked_scope`), and
with the walk over the whole scope, as before. Prints, per N and way, the median wall time, the
queries sent, the CPU seconds Prometheus spent per triage and the ratios narrowed / whole; and
checks the two boards name the same hits, causes and values.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import QueryCounter, counted_runtime  # bench/: run as `python bench/NAME.py`
from fleet import ANCHOR
from harness import _prometheus_cpu
from prom_queries import fleet
from prometheus_client import CollectorRegistry

from diagnosd.daemon import compose
from diagnosd.engine import Scope, triage
from diagnosd.findings.triage import Board
from diagnosd.promlocal import LocalPrometheus

WAYS = ("narrowed", "whole scope")


@contextmanager
def walking(way: str) -> Iterator[None]:
    """The walk as `way` says: narrowed (as shipped), or over the whole scope (as before)."""
    if way == "narrowed":
        yield
        return
    shipped = triage.walked_scope
    triage.walked_scope = lambda scope, targets, strict=(): scope
    try:
        yield
    finally:
        triage.walked_scope = shipped


def said(board: Board) -> list[Any]:
    """What a board says of each present symptom: its hits' targets, causes and values, in order."""
    return [
        (
            p.symptom,
            [
                (sorted(h.labels.items()), h.cause.cause if h.cause else None, h.evidence.value if h.evidence else None)
                for h in p.hits
            ],
        )
        for p in board.present
    ]


async def measure(url: str, here: Path, repeats: int) -> dict[str, dict[str, Any]]:
    counter = QueryCounter()
    runtime = counted_runtime(url, here / "triage.db", counter, ANCHOR, CollectorRegistry())
    out: dict[str, dict[str, Any]] = {way: {"seconds": [], "cpu": [], "queries": 0, "said": None} for way in WAYS}
    async with compose.open_services(runtime) as services:
        for way in WAYS:  # a warm-up of each: Prometheus' caches, the engine's templates
            with walking(way):
                await services.diagnoser.triage(Scope(), ANCHOR)
        for _ in range(repeats):
            for way in WAYS:
                with walking(way):
                    counter.queries = 0
                    cpu, start = await _prometheus_cpu(url), time.perf_counter()
                    board = await services.diagnoser.triage(Scope(), ANCHOR)
                    out[way]["seconds"].append(time.perf_counter() - start)
                    out[way]["cpu"].append(await _prometheus_cpu(url) - cpu)
                    out[way]["queries"] = counter.queries
                    out[way]["said"] = said(board)
    return out


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="diagnosd-bench-") as tmp:
        root = args.fleets or Path(tmp)
        print(f"triage over every shipped tree, medians of {args.repeats}")
        print(f"{'pods':>6} {'way':>12} {'queries':>8} {'wall ms':>9} {'prom cpu s':>11} {'wall x':>7} {'cpu x':>6}")
        for pods in args.sizes:
            here = fleet(pods, root)
            with LocalPrometheus(here / "prometheus", tsdb=here / "tsdb") as prom:
                got = asyncio.run(measure(prom.url, here, args.repeats))
            whole = got["whole scope"]
            for way in WAYS:
                row = got[way]
                wall, cpu = statistics.median(row["seconds"]), statistics.median(row["cpu"])
                ratio = wall / statistics.median(whole["seconds"])
                cpu_ratio = cpu / statistics.median(whole["cpu"]) if statistics.median(whole["cpu"]) else float("nan")
                print(
                    f"{pods:>6} {way:>12} {row['queries']:>8} {wall * 1000:>9.0f} {cpu:>11.2f} "
                    f"{ratio:>7.2f} {cpu_ratio:>6.2f}",
                    flush=True,
                )
            same = got["narrowed"]["said"] == whole["said"]
            print(f"{pods:>6} the boards {'agree' if same else 'DIFFER'}: {got['narrowed']['said']}", flush=True)
            if not same:
                print(f"{pods:>6} whole scope: {whole['said']}", file=sys.stderr)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[10, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fleets", type=Path, default=None, help="keep the backfilled fleets here, and reuse them")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
