"""Benchmark: a scheduler round walking each tree where its symptom is not clear, against the whole walk.

Run: python bench/round_walk.py [N ...] [--repeats R] [--fleets DIR]   (default 10 1000, 3
repeats; needs prometheus and promtool on PATH). Each fleet is the harness' (bench/fleet.py: N
pods with their GPUs, nodes and a gateway, one pod with a full KV pool), backfilled into a real
Prometheus (kept under --fleets DIR when given, and taken from there the next time). Per N, two
daemons composed alike but for `scheduler.walk` (narrowed, as shipped; whole, as before) share
that Prometheus and take turns at rounds in one process, so that both meet the same noise.
Printed per N and way: the median round wall time, the queries sent, the CPU seconds diagnosd
and Prometheus spent per round, the check values kept (diagnosd_check_value's series), and
the ratios narrowed / whole; and whether both daemons hold the same findings after every round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from common import QueryCounter, settings  # bench/: run as `python bench/NAME.py`
from fleet import ANCHOR
from harness import _prometheus_cpu
from prom_queries import fleet
from prometheus_client import CollectorRegistry

from diagnosd.daemon import compose
from diagnosd.daemon.settings import Settings
from diagnosd.findings.fingerprint import labels_key
from diagnosd.promlocal import LocalPrometheus
from diagnosd.sources.base import QuerySource

WAYS = ("narrowed", "whole")


def runtime(url: str, store: Path, counter: QueryCounter, way: str) -> compose.Runtime:
    shipped = settings(url, store)
    measured = Settings.model_validate(
        {**shipped.model_dump(mode="json"), "scheduler": {"enabled": False, "walk": way}}
    )
    assert measured.scheduler.walk == way

    @asynccontextmanager
    async def counted() -> AsyncIterator[QuerySource]:
        async with compose.prometheus_source(measured.prometheus.config()) as source:
            yield counter.wrap(source)

    return compose.build(measured, registry=CollectorRegistry(), clock=lambda: ANCHOR, source=counted)


def held(services: Any) -> list[tuple[str, str, str, str]]:
    """The findings a daemon holds: symptom, cause, target and state."""
    return sorted((f.symptom, f.cause, labels_key(f.labels), str(f.state)) for f in services.tracker.active())


async def measure(url: str, here: Path, repeats: int) -> dict[str, dict[str, Any]]:
    counters = {way: QueryCounter() for way in WAYS}
    out: dict[str, dict[str, Any]] = {
        way: {"seconds": [], "cpu": [], "own": [], "queries": 0, "states": 0} for way in WAYS
    }
    agree = True
    async with AsyncExitStack() as stack:
        daemons = {
            way: await stack.enter_async_context(
                compose.open_services(runtime(url, here / f"round-{way}.db", counters[way], way))
            )
            for way in WAYS
        }
        for way in WAYS:  # a warm-up of each: Prometheus' caches, the engine's templates, the store
            await daemons[way].scheduler.run_round()
        for _ in range(repeats):
            for way in WAYS:
                counters[way].queries = 0
                cpu, own, start = await _prometheus_cpu(url), time.process_time(), time.perf_counter()
                await daemons[way].scheduler.run_round()
                out[way]["seconds"].append(time.perf_counter() - start)
                out[way]["own"].append(time.process_time() - own)
                out[way]["cpu"].append(await _prometheus_cpu(url) - cpu)
                out[way]["queries"] = counters[way].queries
                kept = daemons[way].tracker.states(ANCHOR, settings(url, here).findings.state_ttl)
                out[way]["states"] = sum(len(state.values) for state in kept)
            agree = agree and held(daemons["narrowed"]) == held(daemons["whole"])
        out["narrowed"]["held"] = held(daemons["narrowed"])
    out["narrowed"]["agree"] = agree
    return out


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="diagnosd-bench-") as tmp:
        root = args.fleets or Path(tmp)
        print(f"a scheduler round over every shipped tree, medians of {args.repeats}")
        print(
            f"{'pods':>6} {'way':>9} {'queries':>8} {'wall ms':>9} {'own cpu s':>10} {'prom cpu s':>11} "
            f"{'values':>7} {'wall x':>7} {'own x':>6} {'prom x':>7}"
        )
        for pods in args.sizes:
            here = fleet(pods, root)
            with LocalPrometheus(here / "prometheus", tsdb=here / "tsdb") as prom:
                got = asyncio.run(measure(prom.url, here, args.repeats))
            whole = {k: statistics.median(got["whole"][k]) for k in ("seconds", "own", "cpu")}
            for way in WAYS:
                row = got[way]
                wall, own, cpu = (statistics.median(row[k]) for k in ("seconds", "own", "cpu"))
                print(
                    f"{pods:>6} {way:>9} {row['queries']:>8} {wall * 1000:>9.0f} {own:>10.2f} {cpu:>11.2f} "
                    f"{row['states']:>7} {wall / whole['seconds']:>7.2f} {own / whole['own']:>6.2f} "
                    f"{cpu / whole['cpu'] if whole['cpu'] else float('nan'):>7.2f}",
                    flush=True,
                )
            verdict = "agree" if got["narrowed"]["agree"] else "DIFFER"
            print(f"{pods:>6} the findings {verdict} after every round: {got['narrowed']['held']}", flush=True)
            if not got["narrowed"]["agree"]:
                sys.exit(1)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", nargs="*", type=int, default=[10, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fleets", type=Path, default=None, help="keep the backfilled fleets here, and reuse them")
    return parser.parse_args()


if __name__ == "__main__":
    main(parse())
