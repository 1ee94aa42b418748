"""Alert storms end to end with real components: Alertmanager 0.25 routes storms to a running
diagnosd (uvicorn on a loopback port) backed by a real Prometheus holding a faulty fleet.

A storm of distinct alerts of two symptoms is diagnosed by one evaluation per symptom, each alert
still getting its own record and its own finding link; a group of more new alerts than the queue
holds is accepted (Alertmanager's notification succeeds) and every alert in it is diagnosed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from diagnosd.api import create_app
from diagnosd.daemon.alertmanager.memory import DeliveryMemory
from diagnosd.promlocal.openmetrics import Series
from diagnosd.storage import open_database
from tests.conftest import StartPrometheus
from tests.serving import AT, EPOCH, ThreadedServer, alertmanager, build, counter, settings, wait_until

pytestmark = pytest.mark.slow

# Every pod shows both faults: a queue backlog from a full KV pool, and a low prefix-cache hit
# rate with prefix caching off.
SHAPE = {
    "vllm:num_requests_waiting": (2, 20),
    "vllm:kv_cache_usage_perc": (0.5, 0.95),
    "vllm:gpu_prefix_cache_hit_rate": (0.8, 0.1),
    "vllm:prefix_caching_disabled": (0, 1),
}
ALERTNAMES = {"queue_backlog": "VLLMQueueBacklog", "kv_hit_low": "VLLMKVCacheHitLow"}


def faulty_fleet(pods: int) -> list[Series]:
    """`pods` pods, a healthy hour a day before AT, then the faults in the hour up to AT."""
    start = EPOCH.timestamp()
    out = []
    for n in range(pods):
        labels = {"namespace": "prod", "pod": f"vllm-{n}", "job": "vllm", "model_name": "llama"}
        for name, (before, after) in SHAPE.items():
            early = [(start + i * 60, before) for i in range(61)]
            late = [(start + (1440 + i) * 60, after) for i in range(61)]
            out.append(Series(name, labels, early + late))
    assert (AT - EPOCH).total_seconds() == (1440 + 60) * 60
    return out


def alert(symptom: str, pod: int, starts: datetime) -> dict[str, Any]:
    return {
        "labels": {
            "alertname": ALERTNAMES[symptom],
            "symptom": symptom,
            "severity": "warning",
            "namespace": "prod",
            "pod": f"vllm-{pod}",
            "model_name": "llama",
            "job": "vllm",
        },
        "annotations": {"summary": f"{symptom} on vllm-{pod}"},
        "startsAt": starts.isoformat(),
        "generatorURL": "http://127.0.0.1:9090/graph",
    }


@contextmanager
def daemon(prometheus_url: str, tmp_path: Path, **webhook: Any) -> Iterator[str]:
    config = settings(prometheus_url, tmp_path, webhook=webhook)
    with ThreadedServer(create_app(build(config))) as server:
        yield server.url


def diagnosis_processes() -> list[int]:
    """This process's children that multiprocessing spawned to work (not its resource tracker)."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        with suppress(FileNotFoundError):  # a thread that ended meanwhile, a child gone meanwhile
            for pid in (task / "children").read_text().split():
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
    return found


def states(tmp_path: Path, outcome: str) -> list[Any]:
    """The delivery memory as the daemon wrote it (read through a connection of this thread)."""
    database = open_database(tmp_path / "findings.db")
    try:
        return DeliveryMemory(database).alerts_by_outcome(outcome)
    finally:
        database.close()


def test_a_storm_of_two_symptoms_is_two_evaluations_and_every_alert_its_own_link(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    pods = 40
    prom = start_prometheus(faulty_fleet(pods))
    # As shipped: the batches diagnosed in a process of their own.
    with daemon(prom.url, tmp_path, coalesce_window="2s", processes=1) as url:
        with alertmanager(tmp_path / "alertmanager", f"{url}/webhook/alertmanager", {}) as am:
            starts = datetime.now(UTC).replace(microsecond=0)
            storm = [alert(symptom, n, starts) for symptom in ALERTNAMES for n in range(pods)]
            for start in range(0, len(storm), 10):  # the rule evaluations' posts, ten alerts each
                httpx.post(f"{am}/api/v2/alerts", json=storm[start : start + 10], timeout=5).raise_for_status()
            total = len(storm)
            wait_until(lambda: len(states(tmp_path, "done")) == total, 30, f"{total} alert states done")
            sent = {
                (a["labels"]["symptom"], a["labels"]["pod"]): a["fingerprint"]
                for a in httpx.get(f"{am}/api/v2/alerts", timeout=5).json()
            }
            failed = counter(httpx.get(f"{am}/metrics").text, "alertmanager_notifications_failed_total")
        findings = httpx.get(f"{url}/findings", params={"state": "firing", "limit": 1000}).json()["findings"]
        metrics = httpx.get(f"{url}/metrics").text
        offloaded = diagnosis_processes()
    assert len(offloaded) == 1  # the diagnoses ran there, not on the daemon's event loop
    assert diagnosis_processes() == []  # and the daemon stopped it with itself
    assert len(sent) == total
    # Each alert links the finding on its own pod and symptom, and no other.
    linked = {(f["symptom"], f["labels"]["pod"]): f["alerts"] for f in findings}
    assert linked == {key: [fingerprint] for key, fingerprint in sent.items()}
    assert {(f["symptom"], f["cause"]) for f in findings} == {
        ("queue_backlog", "kv_pool_full"),
        ("kv_hit_low", "prefix_cache_disabled"),
    }
    # The daemon's clock stands still (AT): one window, so one evaluation per symptom, not 80.
    assert counter(metrics, "diagnosd_diagnoses_total", trigger="alert") == 2
    assert failed == 0


def test_a_group_bigger_than_the_queue_is_accepted_and_diagnosed(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    pods = 300
    prom = start_prometheus(faulty_fleet(pods))
    # Not coalesced: each of the 300 alerts is a job of its own, more jobs than the queue's 256.
    with daemon(prom.url, tmp_path, queue_size=256, coalesce_window="0s", processes=1) as url:
        with alertmanager(tmp_path / "alertmanager", f"{url}/webhook/alertmanager", {}) as am:
            starts = datetime.now(UTC).replace(microsecond=0)
            group = [alert("kv_hit_low", n, starts) for n in range(pods)]
            httpx.post(f"{am}/api/v2/alerts", json=group, timeout=5).raise_for_status()

            def notified() -> float:
                text = httpx.get(f"{am}/metrics").text
                return counter(text, "alertmanager_notifications_total", integration="webhook")

            wait_until(notified, 20, "Alertmanager to notify diagnosd")
            wait_until(lambda: len(states(tmp_path, "done")) == pods, 120, f"{pods} alert states done")
            am_metrics = httpx.get(f"{am}/metrics").text
        metrics = httpx.get(f"{url}/metrics").text
        findings = httpx.get(f"{url}/findings", params={"state": "firing", "limit": 1000}).json()["findings"]
    assert counter(am_metrics, "alertmanager_notifications_failed_total", integration="webhook") == 0
    assert counter(metrics, "diagnosd_webhook_deliveries_total", outcome="queue_full") == 0
    assert counter(metrics, "diagnosd_webhook_alerts_total", outcome="queued") == pods
    assert counter(metrics, "diagnosd_diagnoses_total", trigger="alert") == pods
    assert len(findings) == pods
