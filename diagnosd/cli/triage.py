"""`diagnosd triage` and `diagnosd watch`: every symptom at once, worst first (a DRIVERS module).

triage  one pass over every tree's detect for the whole fleet on your Prometheus, then the full
        tree walk only for the symptoms present somewhere; prints the board and exits.
watch   no Prometheus yet: starts a local `prometheus` (from PATH) scraping the given /metrics
        endpoints into a temporary TSDB (removed on exit) and re-runs the triage every --interval
        seconds (redrawn in place on a terminal, appended otherwise). Every scraped target gets
        namespace="local" and pod="<host:port>" (an engine's own /metrics carries neither, and the
        engine trees' target is [namespace, pod]); series that carry their own namespace/pod keep
        them (honor_labels). Checks that compare with a baseline say "no baseline yet" until the
        TSDB reaches back that far.

Exit status of triage (and of watch --once): 0 nothing found (no symptom present on any target;
some symptoms may not have been looked at, the board says why), 4 at least one symptom present,
3 Prometheus could not be reached (or, for watch, started) or nothing at all could be looked at,
2 bad usage. watch without --once: 130 after Ctrl-C (SIGINT), 0 after SIGTERM; everything it
started (Prometheus, the temporary TSDB) is stopped and removed first.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from diagnosd.cli.exits import EXIT_FOUND, EXIT_INTERRUPTED, EXIT_OK, EXIT_SOURCE
from diagnosd.cli.options import (
    config,
    format_lang,
    parse_time,
    prometheus_options,
    prometheus_url,
    topology,
    topology_options,
)
from diagnosd.daemon import compose
from diagnosd.engine import Scope
from diagnosd.errors import ServerError, SourceError, UsageError
from diagnosd.findings.triage import Board
from diagnosd.promlocal import LocalPrometheus
from diagnosd.render import triage as render_triage
from diagnosd.sources import PrometheusConfig

WATCH_JOB = "diagnosd-watch"
WATCH_NAMESPACE = "local"

TRIAGE_DESCRIPTION = """\
Every symptom at once, worst first: one pass over every tree's detect for the whole fleet, then the
full tree walk only for the symptoms present somewhere. For each present symptom: how many targets
have it and, per target, the top root cause with its severity and one evidence line; then the
symptoms that are clear (one line) and those that could not be looked at, with why."""
WATCH_DESCRIPTION = f"""\
No Prometheus yet: starts a local `prometheus` (from PATH) that scrapes the given /metrics endpoints
into a temporary TSDB (removed on exit) and shows the triage board every --interval seconds
(redrawn in place on a terminal, appended otherwise).

Every scraped target is labelled namespace="{WATCH_NAMESPACE}", pod="<host:port>" (an engine's own
/metrics carries neither; the engine trees' target is [namespace, pod]); series that carry their own
namespace/pod keep them. Checks that compare with a baseline say "no baseline yet" until the TSDB
reaches back that far (1d for most)."""
EXIT_HELP = """\
exit status:
  0    nothing found (no symptom present on any target; the board says what was not looked at)
  2    bad usage
  3    Prometheus could not be reached, or nothing at all could be looked at
  4    at least one symptom is present"""
WATCH_HELP = """\
exit status:
  0    --once: nothing found; without --once: stopped by SIGTERM
  2    bad usage
  3    Prometheus could not be started or queried; --once: nothing at all could be looked at
  4    --once: at least one symptom is present
  130  interrupted (Ctrl-C)
Prometheus and the temporary TSDB are always stopped and removed before it exits."""


def register(commands: Any) -> None:
    tri = commands.add_parser(
        "triage",
        help="every symptom at once for the whole fleet, worst first",
        description=TRIAGE_DESCRIPTION,
        epilog=EXIT_HELP,
    )
    prometheus_url(tri)
    tri.add_argument(
        "--match", action="append", default=[], metavar="LABEL=VALUE", help="narrow the scope (repeatable)"
    )
    tri.add_argument("--at", type=parse_time, metavar="TIME", help="RFC3339 or Unix time (default: now)")
    prometheus_options(tri)
    topology_options(tri)
    format_lang(tri)
    tri.set_defaults(handler=run)

    watching = commands.add_parser(
        "watch",
        help="no Prometheus yet: scrape /metrics endpoints into a local Prometheus and triage them live",
        description=WATCH_DESCRIPTION,
        epilog=WATCH_HELP,
    )
    watching.add_argument(
        "--scrape",
        nargs="+",
        required=True,
        metavar="URL",
        help="/metrics endpoints, e.g. http://127.0.0.1:8000 (path default /metrics)",
    )
    watching.add_argument("--interval", type=_seconds, default=30.0, metavar="SECONDS", help="seconds between boards")
    watching.add_argument("--once", action="store_true", help="print one board after the warm-up and exit")
    watching.add_argument(
        "--warmup",
        type=_seconds,
        default=15.0,
        metavar="SECONDS",
        help="seconds of scraping before the first board (at least two scrape intervals)",
    )
    watching.add_argument(
        "--scrape-interval", type=_seconds, default=5.0, metavar="SECONDS", help="how often Prometheus scrapes"
    )
    watching.add_argument("--lang", choices=("en", "zh"), default="en", help="language of the board")
    topology_options(watching)
    watching.add_argument("--prometheus-binary", default="prometheus", metavar="PATH", help="the Prometheus to run")
    watching.set_defaults(handler=watch)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"{text!r} must be zero or more seconds")
    return value


def run(args: argparse.Namespace) -> int:
    rules = compose.load(args.rules)
    board = asyncio.run(_board(config(args), rules, Scope.parse(args.match), args))
    if args.format == "json":
        print(json.dumps(render_triage.board(board), ensure_ascii=False, indent=2))
    else:
        print(render_triage.render(board, args.lang), end="")
    return status(board)


def status(board: Board) -> int:
    if board.found:
        return EXIT_FOUND
    return EXIT_SOURCE if board.blind else EXIT_OK


async def _board(config: PrometheusConfig, rules: compose.Rules, scope: Scope, args: argparse.Namespace) -> Board:
    async with compose.diagnoser(config, rules, topology=topology(args)) as diagnoser:
        return await diagnoser.triage(scope, getattr(args, "at", None))


# watch


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    address: str  # host:port
    path: str


def endpoint(url: str) -> Endpoint:
    """http://host:port[/path] (path default /metrics); a bare host:port means http."""
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise UsageError("--scrape", f"{url!r} is not an http(s)://host:port/metrics URL")
    try:
        port = parsed.port
    except ValueError:
        raise UsageError("--scrape", f"{url!r} has a bad port") from None
    port = port or (443 if parsed.scheme == "https" else 80)
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return Endpoint(parsed.scheme, f"{host}:{port}", parsed.path or "/metrics")


def scrape_configs(endpoints: Sequence[Endpoint], interval: float) -> list[dict[str, object]]:
    """One job per scheme and path; each target labelled namespace="local", pod="<host:port>".

    honor_labels: series that carry their own namespace/pod (a simulator, a proxy) keep them.
    """
    every = f"{max(interval, 1.0):g}s"
    jobs: dict[tuple[str, str], list[Endpoint]] = {}
    for one in endpoints:
        jobs.setdefault((one.scheme, one.path), []).append(one)
    configs: list[dict[str, object]] = []
    for index, ((scheme, path), group) in enumerate(jobs.items()):
        configs.append(
            {
                "job_name": WATCH_JOB if index == 0 else f"{WATCH_JOB}-{index}",
                "honor_labels": True,
                "scheme": scheme,
                "metrics_path": path,
                "scrape_interval": every,
                "scrape_timeout": every,
                "static_configs": [
                    {"targets": [e.address], "labels": {"namespace": WATCH_NAMESPACE, "pod": e.address}}
                    for e in dict.fromkeys(group)
                ],
            }
        )
    return configs


class _Terminated(BaseException):
    """SIGTERM: stop everything started and exit 0."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


@contextmanager
def _signals() -> Iterator[None]:
    """SIGTERM raises _Terminated (SIGINT stays KeyboardInterrupt); both ignored while cleaning up."""
    try:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def watch(args: argparse.Namespace) -> int:
    endpoints = [endpoint(url) for url in args.scrape]
    rules = compose.load(args.rules)
    code = EXIT_OK
    with _signals(), ExitStack() as stack:
        try:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="diagnosd-watch-")))
            prom = LocalPrometheus(
                work,
                scrape=scrape_configs(endpoints, args.scrape_interval),
                scrape_interval=f"{max(args.scrape_interval, 1.0):g}s",
                binary=args.prometheus_binary,
            )
            stack.callback(prom.stop)
            # The TSDB holds nothing older than this: checks reading further back say so (short
            # history) instead of judging rates over a window that is mostly empty.
            args.history_start = datetime.now(UTC)
            prom.start()
            _say(
                f"Prometheus {prom.url} scraping {', '.join(e.address for e in endpoints)} every "
                f"{max(args.scrape_interval, 1.0):g}s into a temporary TSDB (removed on exit); "
                f"first board in {args.warmup:g}s"
            )
            if args.warmup < 2 * max(args.scrape_interval, 1.0):
                _say("note: rates need two scrapes; a warm-up shorter than two scrape intervals sees little")
            time.sleep(args.warmup)
            code = _watch(prom.url, rules, args)
        except KeyboardInterrupt:
            code = EXIT_INTERRUPTED
        except _Terminated:
            code = EXIT_OK
        except ServerError as error:
            print(f"diagnosd watch: {error}", file=sys.stderr)
            code = EXIT_SOURCE
        finally:
            # A second Ctrl-C or SIGTERM must not interrupt stopping Prometheus and removing the TSDB.
            for sig in (signal.SIGINT, signal.SIGTERM):
                try:
                    signal.signal(sig, signal.SIG_IGN)
                except ValueError:
                    break
    return code


def _watch(url: str, rules: compose.Rules, args: argparse.Namespace) -> int:
    config = PrometheusConfig(url=url, timeout=10.0)
    tty = sys.stdout.isatty()
    while True:
        try:
            board, scraped = asyncio.run(_round(config, rules, args))
        except SourceError as error:
            text, code = f"diagnosd watch: the local Prometheus could not be used: {error}\n", EXIT_SOURCE
        else:
            text, code = render_triage.render(board, args.lang) + scraped, status(board)
        if tty:
            sys.stdout.write("\x1b[H\x1b[2J")  # redraw in place
        sys.stdout.write(text if tty else text + "\n")
        sys.stdout.flush()
        if args.once:
            return code
        time.sleep(args.interval)


async def _round(config: PrometheusConfig, rules: compose.Rules, args: argparse.Namespace) -> tuple[Board, str]:
    """One board, and one line saying which endpoints the last scrape reached (a wrong port shows here)."""
    async with compose.diagnoser(config, rules, topology=topology(args)) as diagnoser:
        board = await diagnoser.triage(Scope(), None, history_start=args.history_start)
        up = await diagnoser.source.query(f'up{{job=~"{WATCH_JOB}.*"}}', board.evaluated_at)
    states = sorted((s.labels.get("instance", "?"), s.value == 1) for s in up)
    line = " · ".join(f"{instance} {'up' if ok else 'DOWN'}" for instance, ok in states) or "no scrape yet"
    return board, f"scraped: {line}\n"


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
