"""`diagnosd demo`: a scenario's day of history, a real Prometheus scraping the live fleet, a diagnosis.

Steps: write the history, backfill it with promtool, serve the live fleet on loopback, start
Prometheus (1 s scrapes of the simulator), wait for its first scrape, diagnose the scenario's
symptom for its target through the CLI engine path, print the tree. Every process started here
is stopped here, on Ctrl-C or when `once` is set.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from diagnosd import runtime
from diagnosd.engine import Scope
from diagnosd.errors import ScenarioError
from diagnosd.findings.model import Diagnosis
from diagnosd.render import text as render_text
from diagnosd.rulestest.server import LocalPrometheus
from diagnosd.sim import history
from diagnosd.sim.backfill import backfill
from diagnosd.sim.scenario import Scenario
from diagnosd.sim.server import MetricsServer
from diagnosd.sim.simulator import HISTORY, Simulator
from diagnosd.sources import PrometheusConfig

JOB = "diagnosd-simulate"
Say = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    seed: int = 0
    lang: str = "en"
    once: bool = False
    workdir: Path | None = None
    rules: Path | None = None
    history: float = HISTORY
    first_scrape_timeout: float = 30.0


@dataclass(frozen=True)
class Outcome:
    diagnosis: Diagnosis
    expected: str | None
    found: bool


def scrape_config(port: int, interval: str = "1s") -> dict[str, object]:
    """The scrape job for the simulator: honor_labels keeps the namespace/pod/job/instance it serves."""
    return {
        "job_name": JOB,
        "honor_labels": True,
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
    }


def run(scenario: Scenario, options: Options, say: Say = print) -> Outcome:
    """The whole demo; returns once `options.once` (or after Ctrl-C)."""
    symptom, target = focus(scenario)
    with _workdir(options.workdir) as work:
        anchor = float(math.floor(time.time()))
        sim = Simulator(scenario, anchor=anchor, seed=options.seed, history=options.history)
        say(f"1/5 simulating {_hours(sim.history)} h of history for {len(sim.layout.pods)} engine pods ...")
        started = time.monotonic()
        samples = history.write(work / "history.om", sim)
        say(f"    {samples:,} samples in {time.monotonic() - started:.1f} s")
        started = time.monotonic()
        backfill(work / "history.om", work / "tsdb")
        say(f"2/5 backfilled into a Prometheus TSDB in {time.monotonic() - started:.1f} s")
        with (
            MetricsServer(sim) as server,
            LocalPrometheus(
                work / "prometheus", tsdb=work / "tsdb", scrape=[scrape_config(server.port)], scrape_interval="1s"
            ) as prom,
        ):
            say(f"3/5 simulator live at {server.url}")
            say(f"4/5 Prometheus at {prom.url} scraping it every second; waiting for the first scrape ...")
            _wait_for_scrape(server, options.first_scrape_timeout)
            labels = sim.layout.labels(target, {key: state.name for key, state in sim.pods.items()})
            say(f"5/5 diagnosing {symptom} for {' '.join(f'{k}={v}' for k, v in labels.items())}\n")
            outcome = diagnose(prom.url, symptom, labels, _expected(scenario, symptom, target), options)
            say(render_text.render(outcome.diagnosis, options.lang).rstrip("\n"))
            say(_verdict(outcome))
            if not options.once:
                say(f"\nPrometheus: {prom.url}/graph   simulator: {server.url}\nPress Ctrl-C to stop everything.")
                wait_for_interrupt()
    return outcome


def focus(scenario: Scenario) -> tuple[str, str]:
    """The symptom and target the demo diagnoses: the scenario's first expectation."""
    if not scenario.expect:
        raise ScenarioError(scenario.name or "?", [])
    first = scenario.expect[0]
    return first.symptom, first.target


def _expected(scenario: Scenario, symptom: str, target: str) -> str | None:
    for expectation in scenario.expect:
        if expectation.symptom == symptom and expectation.target == target and expectation.causes:
            return expectation.causes[0]
    return None


def diagnose(url: str, symptom: str, labels: dict[str, str], expected: str | None, options: Options) -> Outcome:
    rules = runtime.load(options.rules)
    tree = rules.ruleset.tree(symptom)
    if tree is None:
        from diagnosd.errors import UnknownSymptom

        raise UnknownSymptom(symptom, list(rules.ruleset.trees))

    async def go() -> Diagnosis:
        async with runtime.evaluator(PrometheusConfig(url=url, timeout=30.0), rules) as evaluator:
            return await evaluator.diagnose(tree, Scope.of(labels))

    diagnosis = asyncio.run(go())
    causes = [c.cause for t in diagnosis.targets for c in t.root_causes]
    return Outcome(diagnosis, expected, expected is None or expected in causes)


def _verdict(outcome: Outcome) -> str:
    if outcome.expected is None:
        return "\n(no root cause expected in this scenario)"
    causes = [c.cause for t in outcome.diagnosis.targets for c in t.root_causes]
    if outcome.found:
        rank = causes.index(outcome.expected) + 1
        return f"\nexpected root cause {outcome.expected}: found (rank {rank} of {len(causes)})"
    return f"\nexpected root cause {outcome.expected}: NOT found (root causes: {', '.join(causes) or 'none'})"


def _wait_for_scrape(server: MetricsServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while server.scrapes == 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Prometheus did not scrape {server.url} within {timeout:g} s")
        time.sleep(0.1)


def wait_for_interrupt() -> None:
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _workdir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    path = Path(tempfile.mkdtemp(prefix="diagnosd-demo-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g}"


def describe(scenario: Scenario) -> list[str]:
    """The scenario's faults, one line each: where, from when, what."""
    lines = []
    for fault in scenario.faults:
        until = f" to {fault.end}" if fault.end else ""
        lines.append(f"  fault on {fault.target} from {fault.start}{until}: {fault.what}")
    return lines
