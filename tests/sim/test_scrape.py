"""A real Prometheus scrapes the simulator: colon names arrive as colon names (reference trap 1)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from diagnosd.promlocal import LocalPrometheus
from diagnosd.sim import scenario
from diagnosd.sim.demo import scrape_config
from diagnosd.sim.server import MetricsServer
from diagnosd.sim.simulator import Simulator

# What Prometheus 2.42 sends: it prefers OpenMetrics, which prometheus-client 0.23+ answers with
# escaping=underscores (client_python#1177). The simulator must answer text 0.0.4 regardless.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def _live(names: str | None = None) -> Simulator:
    loaded = scenario.load("healthy")
    if names:
        loaded = scenario.with_names(loaded, names)
    anchor = float(math.floor(time.time()))
    sim = Simulator(loaded, anchor=anchor, history=3600.0, coarse=900.0)
    sim.run(anchor)
    return sim


@contextmanager
def _scraped(work: Path, names: str | None) -> Iterator[tuple[MetricsServer, LocalPrometheus]]:
    with (
        MetricsServer(_live(names)) as server,
        LocalPrometheus(work, scrape=[scrape_config(server.port)], scrape_interval="1s") as prom,
    ):
        _wait(prom.url, 'up{job="diagnosd-simulate"} == 1')
        yield server, prom


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MetricsServer, LocalPrometheus]]:
    """One Prometheus scraping the default fleet every second, shared by this module's tests."""
    with _scraped(tmp_path_factory.mktemp("scrape"), None) as both:
        yield both


def _query(url: str, promql: str) -> list[dict[str, object]]:
    answer = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    result: list[dict[str, object]] = answer["data"]["result"]
    return result


def _wait(url: str, promql: str, timeout: float = 25.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _query(url, promql)
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"nothing for {promql} within {timeout:g}s")


def test_the_server_answers_text_format_whatever_is_asked(scraped: tuple[MetricsServer, LocalPrometheus]) -> None:
    server, _ = scraped
    answer = httpx.get(server.url, headers={"Accept": PROMETHEUS_ACCEPT}, timeout=10)
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "\nvllm:num_requests_waiting{" in answer.text
    assert httpx.get(server.url.replace("/metrics", "/nope"), timeout=10).status_code == 404


def test_prometheus_stores_the_colon_names_with_the_pods_labels(scraped: tuple[MetricsServer, LocalPrometheus]) -> None:
    server, prom = scraped
    pods = {s.name for s in server.sim.pods.values() if s.pod.deployment.engine == "vllm"}
    running = _wait(prom.url, "vllm:num_requests_running")
    assert {r["metric"]["pod"] for r in running} == pods  # type: ignore[index]
    assert {r["metric"]["namespace"] for r in running} == {"llm-serving"}  # type: ignore[index]
    assert not _query(prom.url, '{__name__=~"vllm_.+"}')
    assert _wait(prom.url, "sum(rate(vllm:prompt_tokens_total[5s])) > 0")
    assert _wait(prom.url, "histogram_quantile(0.95, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5s])))")
    assert _wait(prom.url, "count(sglang:num_queue_reqs) == 2")
    metadata = httpx.get(f"{prom.url}/api/v1/metadata", params={"metric": "vllm:time_to_first_token_seconds"}).json()
    assert metadata["data"]["vllm:time_to_first_token_seconds"][0]["type"] == "histogram"


def test_the_underscore_flavour_is_stored_with_underscores(tmp_path: Path) -> None:
    with _scraped(tmp_path, "underscore") as (_, prom):
        assert _wait(prom.url, "count(vllm_num_requests_running) == 6")
        assert not _query(prom.url, '{__name__=~"vllm:.+"}')


def test_the_clock_is_injectable_and_never_runs_backwards() -> None:
    loaded = scenario.load("healthy")
    anchor = 1_800_000_000.0
    sim = Simulator(loaded, anchor=anchor, history=3600.0, coarse=900.0)
    now = [anchor - 3600.0]
    with MetricsServer(sim, clock=lambda: now[0], tick_every=None) as server:
        now[0] = anchor + 10.0
        first = httpx.get(server.url, timeout=10).text
        assert sim.time == anchor + 10.0
        now[0] = anchor  # backwards: nothing moves
        assert httpx.get(server.url, timeout=10).text == first
        assert server.scrapes == 2
