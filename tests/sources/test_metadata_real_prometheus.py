"""Declared but not yet seen is zero, not absent: a real Prometheus scraping a counter family that
its exporter declares (`# HELP` / `# TYPE ... counter`) before its first event, with no sample.

prometheus_client (LiteLLM's exporter) exposes a labelled Counter without children exactly so:
the family's HELP and TYPE lines and nothing else. Prometheus keeps that metadata for its active
targets, so `/api/v1/metadata` declares the family while no series of it exists.
"""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from diagnosd.engine import Evaluator
from diagnosd.findings import Reason, Verdict
from diagnosd.findings.model import Diagnosis
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.sources.base import Sample
from diagnosd.trees.model import Tree
from tests.conftest import StartPrometheus

TEXT = {"zh": "中", "en": "en"}
OPENMETRICS = "application/openmetrics-text"


def exposition(accept: str) -> tuple[bytes, str]:
    """What LiteLLM's prometheus_client registry answers before any call failed or fell back."""
    registry = CollectorRegistry()
    calls = Counter("gateway_requests", "Client requests", ["model_group"], registry=registry)
    calls.labels(model_group="chat").inc(120)
    calls.labels(model_group="code").inc(40)
    # Labelled counters without children: HELP and TYPE only, no sample until the first event.
    Counter("gateway_failures", "Failed LLM API calls", ["model_group"], registry=registry)
    Counter("gateway_fallbacks", "Fallbacks", ["model_group"], registry=registry)
    if OPENMETRICS in accept:
        from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST
        from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

        return openmetrics(registry), CONTENT_TYPE_LATEST
    return generate_latest(registry), "text/plain; version=0.0.4; charset=utf-8"


@pytest.fixture
def exporter() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body, kind = exposition(self.headers.get("Accept", ""))
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def tree() -> Tree:
    def check(id_: str, query: str, **extra: object) -> dict[str, object]:
        conclusion = {"cause": id_, "title": TEXT, "remediation": [TEXT]}
        return {"id": id_, "title": TEXT, "query": query, "compare": {"above": 0.5}, "conclusion": conclusion, **extra}

    return Tree.model_validate(
        {
            "id": "fallback_frequent",
            "title": TEXT,
            "target": ["model_group"],
            "detect": {"title": TEXT, "query": "sum by ($target) (gateway_requests_total)", "compare": {"above": 1}},
            "nodes": [
                # Failures per second: no series yet means no failure, decided as 0.
                check("failing", "sum by ($target) (rate(gateway_failures_total[5m]))", absent_as_zero=True),
                # The same counter without absent_as_zero: no sample stays unknown (no data).
                check("failing_strict", "sum by ($target) (rate(gateway_fallbacks_total[5m]))"),
                # A name no target declares stays absent.
                check("never_declared", "sum by ($target) (rate(gateway_timeouts_total[5m]))", absent_as_zero=True),
            ],
        }
    )


def started(prom_url: str) -> None:
    """Until the exporter's first scrape is in: its requests answer and its metadata is kept."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reply = httpx.get(f"{prom_url}/api/v1/query", params={"query": "gateway_requests_total"}).json()
        meta = httpx.get(f"{prom_url}/api/v1/metadata").json()
        if reply["data"]["result"] and "gateway_failures" in str(meta["data"]):
            return
        time.sleep(0.3)
    raise AssertionError("the exporter was never scraped")


class WithoutMetadata:
    """A backend that has no metadata endpoint to ask (as the fakes of the engine tests)."""

    def __init__(self, inner: PrometheusSource) -> None:
        self._inner = inner

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        return await self._inner.query(promql, at)

    async def metric_names(
        self, candidates: object, start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        return await self._inner.metric_names(candidates, start, end, where)  # type: ignore[arg-type]


def test_a_declared_counter_without_series_is_zero_not_absent(start_prometheus: StartPrometheus, exporter: str) -> None:
    scrape = [{"job_name": "litellm", "scrape_interval": "1s", "static_configs": [{"targets": [exporter]}]}]
    prom = start_prometheus(scrape=scrape, scrape_interval="1s")
    started(prom.url)

    async def run() -> tuple[dict[str, str] | None, Diagnosis, Diagnosis]:
        config = PrometheusConfig(url=prom.url, timeout=10.0)
        async with config.client() as client:
            source = PrometheusSource(config, client)
            declared = await source.metadata(
                ["gateway_failures_total", "gateway_timeouts_total", "gateway_requests_total"]
            )
            at = datetime.now(UTC)
            with_metadata = await Evaluator(source).diagnose(tree(), None, at)
            without = await Evaluator(WithoutMetadata(source)).diagnose(tree(), None, at)  # type: ignore[arg-type]
            return declared, with_metadata, without

    declared, diagnosis, blind = asyncio.run(run())
    # Prometheus scrapes OpenMetrics (family `gateway_failures`) or the text format
    # (`gateway_failures_total`): either way the series name is declared a counter.
    assert declared == {"gateway_failures_total": "counter", "gateway_requests_total": "counter"}

    targets = {t.labels["model_group"]: t for t in diagnosis.targets}
    assert sorted(targets) == ["chat", "code"]
    for target in targets.values():
        checks = {c.id: c for c in target.checks}
        failing = checks["failing"]
        assert failing.verdict is Verdict.CLEAR, failing
        assert failing.evidence is not None
        assert failing.evidence.value == 0.0
        strict = checks["failing_strict"]
        assert (strict.verdict, strict.reason) == (Verdict.UNKNOWN, Reason.NO_DATA)
        never = checks["never_declared"]
        assert (never.verdict, never.reason) == (Verdict.UNKNOWN, Reason.METRIC_ABSENT)
    assert any("declared by the targets' metadata" in n and "gateway_failures_total" in n for n in diagnosis.notes)

    # Without metadata the same counter is only absent: the check cannot be decided.
    for target in blind.targets:
        failing = next(c for c in target.checks if c.id == "failing")
        assert (failing.verdict, failing.reason) == (Verdict.UNKNOWN, Reason.METRIC_ABSENT)


def test_a_post_mortem_does_not_use_todays_metadata(start_prometheus: StartPrometheus, exporter: str) -> None:
    """Metadata describes the targets scraped now: a diagnosis of last week keeps the name absent."""
    scrape = [{"job_name": "litellm", "scrape_interval": "1s", "static_configs": [{"targets": [exporter]}]}]
    prom = start_prometheus(scrape=scrape, scrape_interval="1s")
    started(prom.url)

    async def run() -> Diagnosis:
        config = PrometheusConfig(url=prom.url, timeout=10.0)
        async with config.client() as client:
            evaluator = Evaluator(PrometheusSource(config, client))
            spellings, _ = await evaluator._spellings(
                ["rate(gateway_failures_total[5m])"], datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
            )
            assert spellings == {"gateway_failures_total": []}
            return await evaluator.diagnose(tree(), None, datetime.now(UTC))

    assert asyncio.run(run()).targets
