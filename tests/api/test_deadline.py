"""`prometheus.diagnosis_deadline` against a Prometheus whose queries hang (respx holds them forever):
the answer comes at the deadline, with what did not answer unknown (timeout), or a 504 when nothing
could be seen; never after the per-query timeout times the retries."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx

from diagnosd.daemon.compose import Runtime
from tests.fakes.prometheus import in_front_of
from tests.serving import AT, build, counted, serve, settings

DEADLINE = 1.0
# Far above the deadline: without one, a held query would hang the request for this long, or forever.
PATIENCE = 10


def deadlined(fleet_url: str, tmp_path: Path) -> Runtime:
    timeouts = {"url": fleet_url, "timeout": "30s", "retries": 2, "diagnosis_deadline": f"{DEADLINE:g}s"}
    return build(settings(fleet_url, tmp_path, prometheus=timeouts))


async def forever(request: httpx.Request) -> None:
    await asyncio.get_running_loop().create_future()


async def test_checks_unanswered_at_the_deadline_are_unknown_timeout(fleet_url: str, tmp_path: Path) -> None:
    async def kv_hangs(request: httpx.Request) -> None:
        if b"kv_cache_usage" in request.content:
            await forever(request)

    async with in_front_of(fleet_url, kv_hangs), serve(deadlined(fleet_url, tmp_path)) as (client, services):
        began = time.monotonic()
        async with asyncio.timeout(PATIENCE):
            response = await client.get("/diagnose/queue_backlog", params={"pod": "vllm-0", "at": AT.isoformat()})
        took = time.monotonic() - began
        partial = counted(services.metrics.diagnoses, trigger="api", outcome="partial")
    assert response.status_code == 200
    [target] = response.json()["targets"]
    assert target["symptom_present"] is True
    kv = next(c for c in target["checks"] if c["id"] == "kv_pool_full")
    assert (kv["verdict"], kv["reason"]) == ("unknown", "timeout")
    assert partial == 1  # cut short is partial, never complete
    assert took < DEADLINE * 2


async def test_nothing_answered_by_the_deadline_is_a_504_that_says_so(fleet_url: str, tmp_path: Path) -> None:
    async def queries_hang(request: httpx.Request) -> None:
        if request.url.path.endswith("/api/v1/query"):
            await forever(request)

    async with in_front_of(fleet_url, queries_hang), serve(deadlined(fleet_url, tmp_path)) as (client, _):
        began = time.monotonic()
        async with asyncio.timeout(PATIENCE):
            response = await client.get("/diagnose/queue_backlog", params={"at": AT.isoformat()})
            board = await client.get("/triage", params={"at": AT.isoformat()})
        took = time.monotonic() - began
    assert response.status_code == 504
    assert response.json()["error"] == "prometheus_timeout"
    assert "no answer within the diagnosis deadline of 1s" in response.json()["message"]
    assert board.status_code == 504
    assert took < DEADLINE * 2 * 2  # two requests, each bounded by its own deadline
