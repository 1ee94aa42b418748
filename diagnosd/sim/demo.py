"""`diagnosd demo`: a scenario's day of history, a real Prometheus scraping the live fleet, the daemon.

Steps: write the history, backfill it with promtool, serve the live fleet on loopback, start
Prometheus (1 s scrapes of the simulator), wait for its first scrape, start `diagnosd serve` on
loopback, ask it `GET /diagnose/<symptom>` for the scenario's target and print the tree it
answers. A scenario that expects nothing (the healthy fleets) has every symptom asked instead, and
must show none. Every process started here is stopped, and the temporary directory removed, on
every way out: the end of `once`, Ctrl-C, SIGTERM, an error.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from diagnosd.promlocal import LocalPrometheus, backfill, free_port, stop
from diagnosd.sim import history
from diagnosd.sim.scenario import Scenario
from diagnosd.sim.server import MetricsServer
from diagnosd.sim.simulator import HISTORY, Simulator

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
    daemon_timeout: float = 60.0


@dataclass(frozen=True)
class Outcome:
    # The daemon's JSON answer (the DESIGN contract) and its text tree; for a scenario that expects
    # nothing, {"diagnoses": [every symptom's answer]} and a board of them.
    diagnosis: dict[str, Any]
    text: str
    expected: str | None
    # The scenario's promise held: its expected cause was found, or, expecting nothing, nothing was.
    found: bool
    # What showed although nothing was expected: "symptom on labels: cause", one each.
    unexpected: tuple[str, ...] = ()

    @property
    def causes(self) -> list[str]:
        return [c["cause"] for t in self.diagnosis.get("targets", []) for c in t["root_causes"]]


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
    focused = focus(scenario)
    with _terminate_as_interrupt(), _workdir(options.workdir) as work:
        anchor = float(math.floor(time.time()))
        sim = Simulator(scenario, anchor=anchor, seed=options.seed, history=options.history)
        say(f"1/6 simulating {_hours(sim.history)} h of history for {len(sim.layout.pods)} engine pods ...")
        started = time.monotonic()
        samples = history.write(work / "history.om", sim)
        say(f"    {samples:,} samples in {time.monotonic() - started:.1f} s")
        started = time.monotonic()
        backfill(work / "history.om", work / "tsdb")
        say(f"2/6 backfilled into a Prometheus TSDB in {time.monotonic() - started:.1f} s")
        with (
            MetricsServer(sim) as server,
            LocalPrometheus(
                work / "prometheus", tsdb=work / "tsdb", scrape=[scrape_config(server.port)], scrape_interval="1s"
            ) as prom,
        ):
            say(f"3/6 simulator live at {server.url}")
            say(f"4/6 Prometheus at {prom.url} scraping it every second; waiting for the first scrape ...")
            _wait_for_scrape(server, options.first_scrape_timeout)
            with daemon(work, prom.url, options) as url:
                say(f"5/6 diagnosd serve at {url}")
                if focused is None:
                    say(f"6/6 every symptom, no cause expected: curl '{url}/diagnose/SYMPTOM?format=json'\n")
                    outcome = sweep(url, options)
                else:
                    symptom, target = focused
                    labels = sim.layout.labels(target, {key: state.name for key, state in sim.pods.items()})
                    query = urllib.parse.urlencode({**labels, "lang": options.lang})
                    say(f"6/6 curl '{url}/diagnose/{symptom}?{query}&format=text'\n")
                    outcome = diagnose(url, symptom, labels, _expected(scenario, symptom, target), options)
                say(outcome.text.rstrip("\n"))
                say(_verdict(outcome))
                if not options.once:
                    say(f"\ndiagnosd: {url}/docs   findings: curl {url}/findings   metrics: {url}/metrics")
                    say(f"Prometheus: {prom.url}/graph   simulator: {server.url}\nPress Ctrl-C to stop everything.")
                    wait_for_interrupt()
    return outcome


def focus(scenario: Scenario) -> tuple[str, str] | None:
    """The symptom and target the demo diagnoses: the scenario's first expectation (None: it has none)."""
    if not scenario.expect:
        return None
    first = scenario.expect[0]
    return first.symptom, first.target


def _expected(scenario: Scenario, symptom: str, target: str) -> str | None:
    for expectation in scenario.expect:
        if expectation.symptom == symptom and expectation.target == target and expectation.causes:
            return expectation.causes[0]
    return None


def diagnose(url: str, symptom: str, labels: dict[str, str], expected: str | None, options: Options) -> Outcome:
    """Ask the daemon, as a user would: the JSON answer decides, the text tree is shown."""
    scope = urllib.parse.urlencode(labels)
    answer = json.loads(_get(f"{url}/diagnose/{symptom}?{scope}&format=json"))
    text = _get(f"{url}/diagnose/{symptom}?{scope}&format=text&lang={options.lang}")
    causes = [c["cause"] for t in answer["targets"] for c in t["root_causes"]]
    return Outcome(answer, text, expected, expected is None or expected in causes)


def sweep(url: str, options: Options) -> Outcome:
    """Every symptom the daemon knows, over the whole fleet: a board, and whatever showed."""
    symptoms = [item["id"] for item in json.loads(_get(f"{url}/symptoms"))]
    answers = [json.loads(_get(f"{url}/diagnose/{symptom}?format=json")) for symptom in symptoms]
    width = max((len(symptom) for symptom in symptoms), default=0)
    lines, unexpected = [], []
    for answer in answers:
        targets = answer["targets"]
        shown = [t for t in targets if t["symptom_present"] or t["root_causes"]]
        title = answer["title"].get(options.lang, answer["title"]["en"])
        for target in shown:
            where = ",".join(f"{k}={v}" for k, v in target["labels"].items()) or "the fleet"
            causes = "/".join(c["cause"] for c in target["root_causes"]) or "no cause found"
            unexpected.append(f"{answer['symptom']} on {where}: {causes}")
        looked = f"{len(targets)} target{'' if len(targets) == 1 else 's'}"
        state = f"SYMPTOM PRESENT on {len(shown)} of {looked}" if shown else f"no symptom on {looked}"
        lines.append(f"{'▲' if shown else '·'} {answer['symptom']:<{width}}  {state:<34} {title}")
    return Outcome({"diagnoses": answers}, "\n".join(lines) + "\n", None, not unexpected, tuple(unexpected))


@contextmanager
def daemon(work: Path, prometheus: str, options: Options) -> Iterator[str]:
    """`diagnosd serve` on a free loopback port against the demo's Prometheus; stopped on exit."""
    port = free_port()
    env = {**os.environ, "DIAGNOSD_PROMETHEUS_URL": prometheus, "DIAGNOSD_STORE_PATH": str(work / "diagnosd.db")}
    rules = ["--rules", str(options.rules)] if options.rules else []
    command = [sys.executable, "-m", "diagnosd", *rules, "serve", "--host", "127.0.0.1", "--port", str(port)]
    with (work / "diagnosd.log").open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(process, url, work / "diagnosd.log", options.daemon_timeout)
        yield url
    finally:
        stop(process)


def _wait_ready(process: subprocess.Popen[bytes], url: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"diagnosd serve exited with {process.returncode}:\n{log.read_text(errors='replace')}")
        try:
            _get(f"{url}/readyz")
            return
        except (OSError, urllib.error.HTTPError):
            time.sleep(0.1)
    raise TimeoutError(f"diagnosd serve not ready on {url} within {timeout:g} s")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=60) as response:
        body: bytes = response.read()
    return body.decode("utf-8")


def _verdict(outcome: Outcome) -> str:
    if outcome.expected is None:
        if outcome.found:
            return "\nno cause expected, none found"
        return "\nno cause expected, but found:\n" + "\n".join(f"  {item}" for item in outcome.unexpected)
    causes = outcome.causes
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
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM unwinds the demo like Ctrl-C does, so that it too stops everything and cleans up."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
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
    lines = [] if scenario.faults else ["  no fault injected: every symptom is asked, and none should show"]
    for fault in scenario.faults:
        until = f" to {fault.end}" if fault.end else ""
        lines.append(f"  fault on {fault.target} from {fault.start}{until}: {fault.what}")
    return lines
