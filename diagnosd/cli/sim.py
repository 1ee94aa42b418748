"""`diagnosd simulate` and `diagnosd demo`: the fleet simulator's command line.

simulate  serve the scenario's fleet on /metrics (loopback by default), or with --out write its
          history as OpenMetrics for `promtool tsdb create-blocks-from openmetrics`
demo      history + Prometheus + live simulator + the diagnosis of the scenario's symptom
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import urllib.error
from pathlib import Path

from diagnosd.cli.exits import EXIT_INTERRUPTED, EXIT_OK, EXIT_RULES, EXIT_USAGE
from diagnosd.cli.options import parse_time
from diagnosd.engine.params import duration
from diagnosd.errors import ServerError
from diagnosd.sim import demo, history, scenario
from diagnosd.sim.scenario import Scenario
from diagnosd.sim.server import MetricsServer
from diagnosd.sim.simulator import Simulator

DEFAULT_SCENARIO = "kv_pool_full"
DEFAULT_PORT = 8900
NAMES = ("v1", "v0", "sglang", "underscore")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulate = commands.add_parser(
        "simulate", help="serve a simulated LLM-serving fleet's /metrics, or write its history"
    )
    simulate.add_argument(
        "--scenario", default="healthy", metavar="NAME|FILE", help="a name from --list, or a YAML file"
    )
    simulate.add_argument("--list", action="store_true", help="list the shipped scenarios and exit")
    simulate.add_argument("--seed", type=int, default=0, help="random seed: one seed, one run")
    simulate.add_argument(
        "--anchor",
        type=parse_time,
        help="when the live series start (default: now); share it "
        "between --out and the live server to continue one run",
    )
    simulate.add_argument(
        "--history", default="26h", metavar="DURATION", help="how much past the model runs before the anchor"
    )
    simulate.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="write the history [anchor-history, anchor] as OpenMetrics and exit",
    )
    simulate.add_argument("--host", default="127.0.0.1", help="listen address (0.0.0.0 for fire drills)")
    simulate.add_argument("--port", type=int, default=DEFAULT_PORT, help="listen port")
    simulate.add_argument(
        "--names",
        choices=NAMES,
        help="engine metric names: vLLM V1 (default), V0, SGLang, or colons stored as underscores",
    )
    simulate.add_argument("--pods", type=int, help="engine pods per Deployment (default: the scenario's)")
    simulate.set_defaults(handler=run)
    show = commands.add_parser("demo", help="a simulated fleet, a local Prometheus and the diagnosis of its fault")
    show.add_argument(
        "--scenario",
        default=DEFAULT_SCENARIO,
        metavar="NAME|FILE",
        help="a name from --list, or a YAML file; the healthy* ones expect no cause",
    )
    show.add_argument("--list", action="store_true", help="list the scenarios with the symptom and cause each shows")
    show.add_argument("--once", action="store_true", help="exit after printing the diagnosis (headless)")
    show.add_argument("--seed", type=int, default=0, help="random seed: one seed, one run")
    show.add_argument(
        "--history", default="26h", metavar="DURATION", help="history to backfill (a day and more gives baselines)"
    )
    show.add_argument("--lang", choices=("en", "zh"), default="en", help="language of the tree and its guidance")
    show.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="keep the history, TSDB and Prometheus files here (default: a temporary directory, removed on exit)",
    )
    show.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args.command == "demo")
    if args.command == "demo":
        return _demo(args)
    return _simulate(args)


def _list(demo_view: bool) -> int:
    """One scenario a line; columns as wide as their longest entry."""
    rows = []
    for name in scenario.names():
        loaded = scenario.load(name)
        shows = ", ".join(f"{e.symptom} → {'/'.join(e.causes)}" for e in loaded.expect) or "no cause expected"
        rows.append((name, loaded.title.en, shows))
    names = max((len(row[0]) for row in rows), default=0)
    titles = max((len(row[1]) for row in rows), default=0)
    for name, title, shows in rows:
        print(f"{name:<{names}}  {title:<{titles}}  [{shows}]" if demo_view else f"{name:<{names}}  {title}")
    return EXIT_OK


def _load(args: argparse.Namespace) -> Scenario:
    loaded = scenario.load(args.scenario, replicas=getattr(args, "pods", None))
    names = getattr(args, "names", None)
    return scenario.with_names(loaded, names) if names else loaded


def _simulate(args: argparse.Namespace) -> int:
    loaded = _load(args)
    anchor = args.anchor.timestamp() if args.anchor else float(math.floor(time.time()))
    sim = Simulator(loaded, anchor=anchor, seed=args.seed, history=duration(args.history, {}).total_seconds())
    if args.out is not None:
        samples = history.write(args.out, sim)
        print(f"wrote {samples:,} samples of {loaded.name} to {args.out} ({args.history} up to {anchor:.0f})")
        print(f"backfill: promtool tsdb create-blocks-from openmetrics {args.out} DATA_DIR")
        print(
            f"continue live: diagnosd simulate --scenario {args.scenario} --seed {args.seed} --history {args.history} "
            f"--anchor {anchor:.0f}"
            + (f" --names {args.names}" if args.names else "")
            + (f" --pods {args.pods}" if args.pods else "")
        )
        return EXIT_OK
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host}: anyone who can reach it sees the simulated fleet", file=sys.stderr)
    print(f"warming up {args.history} of {loaded.name} ...", file=sys.stderr)
    sim.run(anchor)
    try:
        server = MetricsServer(sim, host=args.host, port=args.port)
    except OSError as error:
        print(f"diagnosd simulate: cannot listen on {args.host}:{args.port}: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    with server:
        print(
            f"serving {loaded.name} on {server.url} (scrape it with honor_labels: true); Ctrl-C stops", file=sys.stderr
        )
        demo.wait_for_interrupt()
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    loaded = _load(args)
    options = demo.Options(
        seed=args.seed,
        lang=args.lang,
        once=args.once,
        workdir=args.workdir,
        rules=args.rules,
        history=duration(args.history, {}).total_seconds(),
    )
    print(f"diagnosd demo · {loaded.name}: {loaded.title.zh if args.lang == 'zh' else loaded.title.en}")
    for line in demo.describe(loaded):
        print(line)
    try:
        outcome = demo.run(loaded, options)
    except (ServerError, RuntimeError, TimeoutError, urllib.error.URLError) as error:
        print(f"diagnosd demo: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\ndiagnosd demo: interrupted; everything it started is stopped, its files removed", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.found else EXIT_RULES
