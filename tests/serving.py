"""Helpers for the daemon's tests: fixture rules and series, settings, the app in-process or on a
loopback port (uvicorn in a thread), a real Alertmanager started and always stopped, and counters
read from the app or from a scraped exposition.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import yaml
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from diagnosd.api import create_app
from diagnosd.daemon import compose
from diagnosd.daemon.compose import Services
from diagnosd.daemon.settings.model import Settings
from diagnosd.promlocal import LocalPrometheus, backfill, free_port, stop
from diagnosd.promlocal.openmetrics import Series, write

RULES = Path(__file__).resolve().parent / "fixtures" / "daemon"
# Webhook bodies captured from a real Alertmanager 0.25 (and examples in its shape).
SAMPLES = Path(__file__).resolve().parent / "fixtures" / "alertmanager"
# History starts here; the fault shows 1d later, so baselines (1d) find the healthy day.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
AT = EPOCH + timedelta(days=1, hours=1)
TOKEN = "api-token-0123456789abcdef"
HOOK_TOKEN = "hook-token-0123456789abcdef"


def _points(before: float, after: float) -> list[tuple[float, float]]:
    """One hour at `before` from EPOCH, then one hour at `after` ending at AT (1-minute steps)."""
    start = EPOCH.timestamp()
    early = [(start + i * 60, before) for i in range(61)]
    late = [(start + (1440 + i) * 60, after) for i in range(61)]
    return early + late


def fleet(namespace: str = "prod") -> list[Series]:
    """vllm-0: queue backlog from a full KV pool; vllm-1: healthy; vllm-2: backlog, KV fine.

    For kv_hit_low: vllm-1 has prefix caching disabled and a low hit rate; the others are fine.
    """
    out: list[Series] = []
    shape = {
        "vllm-0": {"waiting": (2, 20), "kv": (0.5, 0.95), "hit": (0.8, 0.8), "disabled": (0, 0)},
        "vllm-1": {"waiting": (2, 2), "kv": (0.5, 0.5), "hit": (0.8, 0.1), "disabled": (0, 1)},
        "vllm-2": {"waiting": (2, 20), "kv": (0.5, 0.5), "hit": (0.8, 0.8), "disabled": (0, 0)},
    }
    names = {
        "waiting": "vllm:num_requests_waiting",
        "kv": "vllm:kv_cache_usage_perc",
        "hit": "vllm:gpu_prefix_cache_hit_rate",
        "disabled": "vllm:prefix_caching_disabled",
    }
    for pod, values in shape.items():
        labels = {"namespace": namespace, "pod": pod, "job": "vllm", "model_name": "llama"}
        for key, (before, after) in values.items():
            out.append(Series(names[key], labels, _points(before, after)))
    return out


@contextmanager
def fleet_prometheus(workdir: Path, scraping: int | None = None) -> Iterator[str]:
    """A real Prometheus holding the fleet's history (backfilled before it starts); yields its URL.

    With `scraping`, it also scrapes a diagnosd on that loopback port every second (with TOKEN)."""
    workdir.mkdir(parents=True, exist_ok=True)
    with (workdir / "fleet.om").open("w") as out:
        write(out, fleet())
    backfill(workdir / "fleet.om", workdir / "tsdb")
    scrape: list[dict[str, object]] = []
    if scraping is not None:
        scrape.append(
            {
                "job_name": "diagnosd",
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "authorization": {"credentials": TOKEN},
                "static_configs": [{"targets": [f"127.0.0.1:{scraping}"]}],
            }
        )
    with LocalPrometheus(
        workdir, tsdb=workdir / "tsdb", scrape=scrape, scrape_interval="1s" if scrape else "15s"
    ) as prom:
        yield prom.url


def settings(prometheus_url: str, tmp_path: Path, **sections: Any) -> Settings:
    data: dict[str, Any] = {
        "prometheus": {"url": prometheus_url, "timeout": "5s", "retries": 0},
        "store": {"path": str(tmp_path / "findings.db")},
        "rules_dir": str(RULES),
        "scheduler": {"enabled": False},
        "findings": {"for": "0s"},
        # No coalescing window unless a test asks for one: every delivery would wait out the
        # default 2 s before its diagnosis (tests/daemon/alertmanager covers the window). Batches
        # diagnosed on the event loop unless a test asks for processes: its respx faults live in
        # this process (tests/daemon/alertmanager/test_offload.py and the storm tests run them).
        "webhook": {"alertname_map": {"VLLMQueueBacklog": "queue_backlog"}, "coalesce_window": "0s", "processes": 0},
    }
    for name, section in sections.items():
        data[name] = {**data.get(name, {}), **section} if isinstance(section, Mapping) else section
    return Settings.model_validate(data)


def build(config: Settings, clock: Callable[[], datetime] | None = None, **options: Any) -> compose.Runtime:
    return compose.build(config, registry=CollectorRegistry(), clock=clock or (lambda: AT), **options)


@asynccontextmanager
async def serve(built: compose.Runtime, token: str | None = None) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    """The app in-process: lifespan run, an httpx client over ASGI (no socket), then shut down."""
    app = create_app(built)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://diagnosd", headers=headers) as client:
            yield client, app.state.services


class ThreadedServer:
    """The app behind a real uvicorn on a loopback port, in a thread; always stopped by its owner."""

    def __init__(self, app: FastAPI, port: int | None = None) -> None:
        self.port = port or free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)
        self.app = app

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@contextmanager
def alertmanager(workdir: Path, webhook_url: str, http_config: Mapping[str, Any]) -> Iterator[str]:
    """A real Alertmanager routing every alert to `webhook_url` within a second; yields its URL."""
    config = {
        "route": {
            "receiver": "diagnosd",
            "group_by": ["alertname"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {
                "name": "diagnosd",
                "webhook_configs": [{"url": webhook_url, "send_resolved": True, "http_config": dict(http_config)}],
            }
        ],
    }
    with run_alertmanager(workdir, config) as url:
        yield url


@contextmanager
def run_alertmanager(workdir: Path, config: Mapping[str, Any], port: int | None = None) -> Iterator[str]:
    """A real Alertmanager 0.25 on loopback (no cluster gossip, fresh storage); yields its URL.

    `port`: a port chosen beforehand (a client told the URL before Alertmanager is up)."""
    binary = shutil.which("prometheus-alertmanager")
    if binary is None:
        raise RuntimeError("prometheus-alertmanager not found (Debian: apt-get install prometheus-alertmanager)")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "alertmanager.yml").write_text(yaml.safe_dump(dict(config)))
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    log = (workdir / "alertmanager.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={workdir / 'alertmanager.yml'}",
            f"--storage.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.external-url={url}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    try:
        wait_until(lambda: process.poll() is not None or _ready(url), 15, f"alertmanager on {url}")
        assert process.poll() is None, (workdir / "alertmanager.log").read_text()
        yield url
    finally:
        stop(process)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_until(condition: Callable[[], Any], seconds: float, what: str, every: float = 0.05) -> Any:
    """Poll `condition` until it returns something truthy; fail with `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:g}s waiting for {what}")
        time.sleep(every)


def sample(name: str) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads((SAMPLES / name).read_text())
    return data


def counted(metric: Any, **labels: str) -> float:
    """A counter's current value for these labels (0 when never incremented), registered or not."""
    for family in metric.collect():
        for found in family.samples:
            if found.name.endswith("_total") and found.labels == labels:
                return float(found.value)
    return 0.0


def counter(text: str, name: str, **labels: str) -> float:
    """The sum of a counter's samples in an exposition carrying at least these labels."""
    total = 0.0
    for line in text.splitlines():
        found = re.match(rf"{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if found and all(f'{k}="{v}"' in (found.group(1) or "") for k, v in labels.items()):
            total += float(found.group(2))
    return total
