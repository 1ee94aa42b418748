"""Fault injection between diagnosd and Prometheus (respx at the HTTP seam, and a closed port):
every failure is an error with a precise message, or an `unknown` with its reason, never "no problem".
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from diagnosd.promlocal import free_port
from tests.fakes.prometheus import api_error, in_front_of
from tests.serving import AT, build, counted, sample, serve, settings

Failure = Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]


async def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


async def slow(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("timed out", request=request)


async def broken(request: httpx.Request) -> httpx.Response:
    return httpx.Response(500, text="<html>upstream exploded</html>")


async def rejecting(request: httpx.Request) -> httpx.Response:
    return api_error(400, "bad_data", "parse error")


async def not_ready(request: httpx.Request) -> httpx.Response:
    return api_error(503, "unavailable", "TSDB not ready")


async def test_an_unreachable_prometheus_is_503_with_what_failed(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with serve(build(settings(url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/queue_backlog")
        alive = await client.get("/healthz")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    body = response.json()
    assert body["error"] == "prometheus_unavailable"
    assert body["message"].startswith("Prometheus cannot be reached, so nothing was looked at: cannot reach Prometheus")
    assert body["prometheus"].startswith(url)
    assert alive.status_code == 200


@pytest.mark.parametrize(
    ("failure", "status", "code"),
    [
        (refused, 503, "prometheus_unavailable"),
        (slow, 504, "prometheus_timeout"),
        (broken, 502, "prometheus_error"),
        (rejecting, 502, "prometheus_error"),
        (not_ready, 503, "prometheus_unavailable"),
    ],
)
async def test_each_failure_maps_to_its_status(tmp_path: Path, failure: Failure, status: int, code: str) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there: `failure` answers every request
    async with in_front_of(url, failure), serve(build(settings(url, tmp_path))) as (client, services):
        response = await client.get("/diagnose/queue_backlog", params={"namespace": "prod"})
        errors = counted(services.metrics.diagnoses, trigger="api", outcome="error")
    assert response.status_code == status
    assert response.json()["error"] == code
    assert errors == 1


async def test_a_partial_outage_is_unknown_never_clear(fleet_url: str, tmp_path: Path) -> None:
    async def kv_fails(request: httpx.Request) -> httpx.Response | None:
        if b"kv_cache_usage" in request.content:
            raise httpx.ConnectError("connection reset", request=request)
        return None

    built = build(settings(fleet_url, tmp_path))
    async with in_front_of(fleet_url, kv_fails), serve(built) as (client, _):
        response = await client.get("/diagnose/queue_backlog", params={"pod": "vllm-0", "at": AT.isoformat()})
    assert response.status_code == 200
    [target] = response.json()["targets"]
    assert target["symptom_present"] is True
    assert target["root_causes"] == []
    kv = next(c for c in target["checks"] if c["id"] == "kv_pool_full")
    assert (kv["verdict"], kv["reason"]) == ("unknown", "query_error")


async def test_findings_survive_an_outage_unresolved(fleet_url: str, tmp_path: Path) -> None:
    down = False

    async def outage(request: httpx.Request) -> httpx.Response | None:
        if down:
            raise httpx.ConnectError("connection refused", request=request)
        return None

    built = build(settings(fleet_url, tmp_path))
    async with in_front_of(fleet_url, outage), serve(built) as (client, services):
        await client.post("/webhook/alertmanager", json=sample("webhook-received.json"))
        await services.inbox.join()
        down = True
        round_ = await services.scheduler.run_round()
        refire = sample("webhook-received.json")
        refire["alerts"][0]["startsAt"] = "2026-11-29T15:00:00Z"  # a new alert state: diagnosed again
        await client.post("/webhook/alertmanager", json=refire)
        await services.inbox.join()
        findings = (await client.get("/findings")).json()["findings"]
        ready = await client.get("/readyz")
        metrics = (await client.get("/metrics")).text
        failed = services.memory.alerts_by_outcome("failed")
    assert round_.outcome == "error"
    assert [(f["cause"], f["state"]) for f in findings] == [("kv_pool_full", "firing")]
    assert 'diagnosd_root_cause{cause="kv_pool_full"' in metrics
    assert [r.key[2] for r in failed] == ["2026-11-29T15:00:00+00:00"]
    assert "cannot reach Prometheus" in (failed[0].error or "")
    assert ready.status_code == 503
    assert ready.json()["checks"]["prometheus"]["ok"] is False


async def test_a_failed_alert_diagnosis_is_retried_when_prometheus_is_back(fleet_url: str, tmp_path: Path) -> None:
    down = True

    async def outage(request: httpx.Request) -> httpx.Response | None:
        if down:
            raise httpx.ConnectError("connection refused", request=request)
        return None

    config = settings(fleet_url, tmp_path, webhook={"retry_after": "1s"})
    now = [AT]
    built = build(config, clock=lambda: now[0])
    async with in_front_of(fleet_url, outage), serve(built) as (client, services):
        await client.post("/webhook/alertmanager", json=sample("webhook-received.json"))
        await services.inbox.join()
        before = (await client.get("/findings")).json()["count"]
        down = False
        assert services.inbox.requeue() == 0  # not due yet
        now[0] = AT + timedelta(seconds=2)
        assert services.inbox.requeue() == 1
        await services.inbox.join()
        after = (await client.get("/findings")).json()["findings"]
    assert before == 0
    assert [f["cause"] for f in after] == ["kv_pool_full"]
