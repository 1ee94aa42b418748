"""`diagnosd serve`: the daemon driver. Builds the settings once (file, DIAGNOSD_*, flags), checks
them with the rules and the store, then serves the app with uvicorn until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from diagnosd.daemon import compose
from diagnosd.daemon.settings.loader import dumps, load_settings
from diagnosd.findings.store import Store
from diagnosd.logs import writing_behind

log = logging.getLogger("diagnosd")

# What a request answering at its deadline needs to be written out, on top of the deadline.
SHUTDOWN_MARGIN_SECONDS = 3


def register(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the daemon: REST API, Alertmanager webhook, scheduler rounds, /metrics",
        description="Settings come from --config FILE, then DIAGNOSD_* variables (e.g. DIAGNOSD_PROMETHEUS_URL), "
        "then these flags.",
    )
    serve.add_argument("--config", type=Path, metavar="FILE", help="YAML settings file")
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8080)")
    serve.add_argument(
        "--check", action="store_true", help="validate settings, rules and store, print the settings (secrets masked)"
    )
    serve.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config, os.environ, _overrides(args))
    # A flood of one warning (refused deliveries, Prometheus down) becomes one line and a count;
    # the lines are written off the event loop's thread.
    with writing_behind(settings.log_level.upper()) as drain, _drained_on_sigterm(drain):
        built = compose.build(settings)
        Store.open(settings.store.location()).close()  # a store that cannot be opened stops us here, clearly
        if args.check:
            print(dumps(settings))
            return 0
        _serve(built)
    return 0


@contextlib.contextmanager
def _drained_on_sigterm(drain: Callable[[], None]) -> Iterator[None]:
    """SIGTERM, once uvicorn has shut down gracefully (it raises the signal again then, and this
    handler is the one it restores), or before it serves: the queued log lines are written, then the
    process ends by the signal as before. Its default action runs no `finally` to write them."""

    def written_then_terminated(signum: int, frame: FrameType | None) -> None:
        drain()
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    previous = signal.signal(signal.SIGTERM, written_then_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _overrides(args: argparse.Namespace) -> dict[tuple[str, ...], Any]:
    overrides: dict[tuple[str, ...], Any] = {}
    if args.host is not None:
        overrides[("server", "host")] = args.host
    if args.port is not None:
        overrides[("server", "port")] = args.port
    if getattr(args, "rules", None) is not None:
        overrides[("rules_dir",)] = str(args.rules)
    return overrides


def _serve(built: compose.Runtime) -> None:
    import uvicorn

    from diagnosd.api import create_app
    from diagnosd.api.auth import RedactQueries

    # uvicorn writes each request's target, query string included, to this logger.
    logging.getLogger("uvicorn.access").addFilter(RedactQueries())
    server = built.settings.server
    log.info(
        "serving on http://%s:%d; prometheus %s; rules %s (%d trees); store %s; rounds %s",
        server.host,
        server.port,
        built.settings.prometheus.url,
        built.rules.directory,
        len(built.rules.ruleset.trees),
        built.settings.store.shown(),
        f"every {built.settings.scheduler.interval}" if built.settings.scheduler.enabled else "off",
    )
    uvicorn.run(
        create_app(built),
        host=server.host,
        port=server.port,
        log_config=None,
        log_level=built.settings.log_level.value,
        access_log=server.access_log,
        server_header=False,
        # A request in flight at SIGTERM answers within its diagnosis deadline; past that and a
        # margin to write the answer, uvicorn cancels it, and the lifespan then stops the workers
        # (their alerts stay queued in the store). Bounded, so Kubernetes never has to SIGKILL.
        timeout_graceful_shutdown=math.ceil(built.settings.prometheus.diagnosis_deadline.total_seconds())
        + SHUTDOWN_MARGIN_SECONDS,
    )
