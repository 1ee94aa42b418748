"""Two diagnosd replicas on one PostgreSQL, as real processes (`python -m diagnosd serve`), behind a
real Alertmanager 0.25 whose receiver names both (as a Service in front of an HA pair would reach
either: here each delivery reaches both), a real Prometheus holding a faulty fleet. A burst of
distinct alerts, and one replica killed with SIGKILL while it holds claimed alerts: every distinct
alert state ends with exactly one diagnosis record and its findings (nothing lost, none twice), the
alerts the dead replica held are diagnosed by the survivor, and the survivor runs the rounds after.

Everything is counted (rows, counters), never timed: each wait is for a count to be reached.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from diagnosd.daemon.alertmanager.memory import AlertRecord, DeliveryMemory
from diagnosd.findings.store import Store
from diagnosd.promlocal import free_port, stop
from diagnosd.promlocal.openmetrics import Series
from diagnosd.storage import open_database
from tests.cli.test_serve import REPO, command, environ
from tests.conftest import StartPrometheus
from tests.serving import counter, run_alertmanager, wait_until

pytestmark = pytest.mark.slow

PODS = 30  # x 2 symptoms: 60 distinct alert states
CHUNK = 6  # alerts per post to Alertmanager, as a rule group's evaluation posts them
# Every pod shows both faults (see tests/integration/test_storm_alertmanager.py).
SHAPE = {
    "vllm:num_requests_waiting": 20.0,
    "vllm:kv_cache_usage_perc": 0.95,
    "vllm:gpu_prefix_cache_hit_rate": 0.1,
    "vllm:prefix_caching_disabled": 1.0,
}
CAUSES = {"queue_backlog": "kv_pool_full", "kv_hit_low": "prefix_cache_disabled"}
ALERTNAMES = {"queue_backlog": "VLLMQueueBacklog", "kv_hit_low": "VLLMKVCacheHitLow"}
LEASE_SECONDS = 3


def live_fleet(pods: int) -> list[Series]:
    """The faults from an hour ago to an hour ahead (one sample a minute): the replicas diagnose at
    the real time, which the backfilled history then covers for as long as the test runs."""
    now = int(time.time())
    points = range(now - 3600, now + 3600, 60)
    out = []
    for n in range(pods):
        labels = {"namespace": "prod", "pod": f"vllm-{n}", "job": "vllm", "model_name": "llama"}
        out += [Series(name, labels, [(t, value) for t in points]) for name, value in SHAPE.items()]
    return out


def alert(symptom: str, pod: int, starts: str) -> dict[str, Any]:
    labels = {"alertname": ALERTNAMES[symptom], "symptom": symptom, "severity": "warning", "namespace": "prod"}
    return {"labels": labels | {"pod": f"vllm-{pod}", "model_name": "llama"}, "startsAt": starts}


@dataclass
class Replica:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def owner(self) -> str:
        """Whose its claims are in the store (compose.replica: host and pid)."""
        return f"{socket.gethostname()}:{self.process.pid}"

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=5).text

    def rounds(self, outcome: str) -> float:
        return counter(self.metrics(), "diagnosd_rounds_total", outcome=outcome)

    def healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"replica exited {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False


@contextmanager
def replica(name: str, tmp_path: Path, prometheus: str, store_url: str, port: int) -> Iterator[Replica]:
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        json.dumps(
            {
                "prometheus": {"url": prometheus, "timeout": "5s", "retries": 0},
                "store": {"url": store_url},
                "scheduler": {"interval": "1s"},
                # A window: a replica holds claimed alerts for a while before it diagnoses them.
                "webhook": {"coalesce_window": "2s", "lease": f"{LEASE_SECONDS}s"},
            }
        )
    )
    log = tmp_path / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command("--config", str(config), "--port", str(port)),
            env=environ(),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
    started = Replica(process, f"http://127.0.0.1:{port}", log)
    try:
        wait_until(started.healthy, 30, f"replica {name} to answer /healthz")
        yield started
    finally:
        if process.poll() is None:
            stop(process)


def states(store_url: str) -> list[AlertRecord]:
    database = open_database(store_url)
    try:
        memory = DeliveryMemory(database)
        return [
            r
            for outcome in ("queued", "done", "failed", "rejected", "superseded")
            for r in memory.alerts_by_outcome(outcome)
        ]
    finally:
        database.close()


def claimed(store_url: str, count: int) -> bool:
    return len(states(store_url)) >= count


def settled(store_url: str, count: int) -> bool:
    return sum(r.outcome == "done" for r in states(store_url)) >= count


def test_two_replicas_one_killed_mid_burst_lose_nothing_and_diagnose_nothing_twice(
    tmp_path: Path, start_prometheus: StartPrometheus, postgres_url: str
) -> None:
    prometheus = start_prometheus(live_fleet(PODS))
    ports = {"a": free_port(), "b": free_port()}
    routing = {
        "route": {
            "receiver": "diagnosd",
            "group_by": ["alertname", "pod"],  # a group per alert: each claimed by either
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {
                "name": "diagnosd",
                "webhook_configs": [
                    {"url": f"http://127.0.0.1:{port}/webhook/alertmanager", "send_resolved": True}
                    for port in ports.values()
                ],
            }
        ],
    }
    with ExitStack() as stack:
        am = stack.enter_context(run_alertmanager(tmp_path / "alertmanager", routing))
        doomed = stack.enter_context(replica("a", tmp_path, prometheus.url, postgres_url, ports["a"]))
        # The first replica up leads: wait for its first round before the second starts.
        wait_until(lambda: doomed.rounds("ok") + doomed.rounds("partial"), 30, "replica a's first round")
        survivor = stack.enter_context(replica("b", tmp_path, prometheus.url, postgres_url, ports["b"]))
        wait_until(lambda: survivor.rounds("standby"), 30, "replica b standing by")

        starts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        burst = [alert(symptom, n, starts) for symptom in ALERTNAMES for n in range(PODS)]

        def doomed_s(outcome: str) -> set[tuple[str, str, str]]:
            return {r.key for r in states(postgres_url) if r.owner == doomed.owner and r.outcome == outcome}

        chunks = iter(range(0, len(burst), CHUNK))

        def post_next() -> int:
            """Post the next chunk to Alertmanager; wait until both replicas have seen it (each of
            its states claimed by one); returns how many states are posted so far."""
            start = next(chunks)
            httpx.post(f"{am}/api/v2/alerts", json=burst[start : start + CHUNK], timeout=5).raise_for_status()
            wait_until(partial(claimed, postgres_url, start + CHUNK), 30, f"{start + CHUNK} alert states claimed")
            return start + CHUNK

        # First the doomed replica diagnoses some alerts to the end...
        posted = post_next()
        wait_until(partial(settled, postgres_url, posted), 60, f"{posted} alert states diagnosed")
        while not doomed_s("done"):
            posted = post_next()
            wait_until(partial(settled, postgres_url, posted), 60, f"{posted} alert states diagnosed")
        # ...then, mid-burst, it dies while it holds claimed alerts not yet diagnosed.
        while not doomed_s("queued"):
            posted = post_next()
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait(timeout=10)
        finished = doomed_s("done")  # what it diagnosed before it died
        orphans = doomed_s("queued")  # what it held when it died, no one working on them now
        led_before = survivor.rounds("ok") + survivor.rounds("partial")
        assert len(burst) - posted >= CHUNK, "the burst ended before the kill"
        for start in chunks:  # the rest of the burst, to the survivor alone
            httpx.post(f"{am}/api/v2/alerts", json=burst[start : start + CHUNK], timeout=5).raise_for_status()

        total = len(burst)
        wait_until(
            lambda: sum(r.outcome == "done" for r in states(postgres_url)) >= total, 120, f"{total} alert states done"
        )
        wait_until(
            lambda: survivor.rounds("ok") + survivor.rounds("partial") >= led_before + 2, 60, "the survivor's rounds"
        )
        sent = {
            (a["labels"]["symptom"], a["labels"]["pod"]): a["fingerprint"]
            for a in httpx.get(f"{am}/api/v2/alerts", timeout=5).json()
        }
        survivor_metrics = survivor.metrics()
    records = states(postgres_url)
    database = open_database(postgres_url)
    try:
        store = Store(database)
        findings = store.active()
        episodes = {f.fingerprint: len(store.episodes(f.fingerprint)) for f in findings}
    finally:
        database.close()

    assert len(sent) == total
    # Nothing lost: every distinct alert state sent has its record, and it is done...
    assert {r.key[0] for r in records} == set(sent.values())
    assert len(records) == total
    # ...diagnosed once: one `done` each, never marked twice (a second mark would count an attempt).
    assert {(r.outcome, r.attempts) for r in records} == {("done", 1)}
    # What the dead replica diagnosed stays its own; what it held, the survivor diagnosed.
    assert finished
    assert orphans
    owners = {r.key: r.owner for r in records}
    assert {owners[key] for key in finished} == {doomed.owner}
    assert {owners[key] for key in orphans} == {survivor.owner}
    # Its findings, none twice: each alert links exactly one finding, on its own target and cause,
    # and each finding is one episode.
    linked: dict[str, list[tuple[str, str, str]]] = {}
    for f in findings:
        for fingerprint in f.alerts:
            linked.setdefault(fingerprint, []).append((f.symptom, f.cause, f.labels["pod"]))
    assert linked == {fp: [(symptom, CAUSES[symptom], pod)] for (symptom, pod), fp in sent.items()}
    assert set(episodes.values()) == {1}
    # The survivor leads the rounds now; it exports the findings the dead replica wrote too.
    assert counter(survivor_metrics, "diagnosd_root_cause") >= total
