"""The Grafana annotations sink against the documented shapes of Grafana's HTTP API (respx; no
Grafana binary is available): POST /api/annotations answers {"id": N, "message": ...},
PATCH /api/annotations/:id takes the timeEnd, GET /api/annotations?tags=... finds by tags.
Grafana down, then up; down for a whole episode; a restart finding its open region; a refusal;
and a daemon whose Grafana hangs still diagnosing.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import respx

from diagnosd.findings.lifecycle import Finding
from diagnosd.sinks.grafana import GrafanaConfig, GrafanaSink, millis
from tests.serving import build, fleet_prometheus, sample, serve, settings
from tests.sinks.builders import AT, Tally, finding, words

GRAFANA = "http://grafana:3000"
NOW = AT.replace(hour=5)
ADDED = {"id": 7, "message": "Annotation added"}


def config(**options: Any) -> GrafanaConfig:
    return GrafanaConfig(
        url=GRAFANA, token="glsa_token", backoff=0.01, external_url="https://diagnosd.example", **options
    )


def grafana(findings: list[Finding], tally: Tally, **options: Any) -> GrafanaSink:
    return GrafanaSink(config(**options), lambda: findings, words, tally, clock=lambda: NOW)


def body(call: respx.models.Call) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(call.request.content)
    return found


def routes(mock: respx.MockRouter, found: list[dict[str, Any]] | None = None) -> tuple[respx.Route, ...]:
    lookup = mock.get(f"{GRAFANA}/api/annotations").respond(200, json=found or [])
    opened = mock.post(f"{GRAFANA}/api/annotations").respond(200, json=ADDED)
    closed = mock.patch(url__regex=rf"{GRAFANA}/api/annotations/\d+").respond(
        200, json={"message": "Annotation patched"}
    )
    return lookup, opened, closed


async def test_a_region_opens_when_the_finding_fires_and_closes_when_it_resolves() -> None:
    findings = [finding("vllm-0")]
    f = findings[0]
    tally = Tally()
    with respx.mock(assert_all_called=True) as mock:
        lookup, opened, closed = routes(mock)
        sink = grafana(findings, tally, dashboard_uid="diagnosd-triage")
        await sink.start()
        await tally.reached("grafana", "sent")
        findings.clear()
        sink.wake()
        await tally.reached("grafana", "sent", 2)
        await sink.stop()
    start = millis(f.phase.fired_at)  # type: ignore[arg-type]
    assert lookup.calls[0].request.url.params.get_list("tags") == ["diagnosd", f"finding:{f.fingerprint}"]
    posted = body(opened.calls[0])
    assert posted == {
        "time": start,
        "tags": [
            "diagnosd",
            "symptom:queue_backlog",
            "cause:kv_pool_full",
            "severity:warning",
            f"finding:{f.fingerprint}",
        ],
        "text": "root cause: kv_pool_full title (symptom queue_backlog on namespace=prod, pod=vllm-0)\n"
        f"kv_pool_full: 0.95 (threshold > 0.9)\nhttps://diagnosd.example/findings/{f.fingerprint}",
        "dashboardUID": "diagnosd-triage",
    }
    assert opened.calls[0].request.headers["authorization"] == "Bearer glsa_token"
    [patch] = closed.calls
    assert patch.request.url.path == "/api/annotations/7"
    assert body(patch) == {"timeEnd": millis(NOW)}


async def test_grafana_down_then_up_gets_the_annotation_once() -> None:
    findings = [finding("vllm-0")]
    tally = Tally()
    with respx.mock(assert_all_called=False) as mock:
        _, opened, _ = routes(mock)
        opened.mock(side_effect=[httpx.ConnectError("refused"), httpx.Response(502), httpx.Response(200, json=ADDED)])
        sink = grafana(findings, tally)
        await sink.start()
        await tally.reached("grafana", "sent")
        await sink.stop()
    assert tally["grafana", "failed"] == 2
    assert opened.call_count == 3
    assert "timeEnd" not in body(opened.calls[-1])


async def test_an_episode_over_before_grafana_came_back_is_one_closed_region() -> None:
    findings = [finding("vllm-0")]
    up = asyncio.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=ADDED) if up.is_set() else httpx.Response(503)

    tally = Tally()
    with respx.mock(assert_all_called=False) as mock:
        _, opened, closed = routes(mock)
        opened.mock(side_effect=answer)
        sink = grafana(findings, tally)
        await sink.start()
        await tally.reached("grafana", "failed")
        findings.clear()
        sink.wake()
        up.set()
        await tally.reached("grafana", "sent")
        await sink.stop()
    posted = body(opened.calls[-1])
    assert posted["timeEnd"] == millis(NOW)
    assert posted["time"] < posted["timeEnd"]
    assert closed.call_count == 0


async def test_after_a_restart_the_open_region_is_found_and_closed_not_duplicated() -> None:
    findings = [finding("vllm-0")]
    f = findings[0]
    start = millis(f.phase.fired_at)  # type: ignore[arg-type]
    earlier = [{"id": 11, "time": start, "timeEnd": start, "tags": ["diagnosd"], "text": "..."}]
    tally = Tally()
    with respx.mock(assert_all_called=False) as mock:
        _, opened, closed = routes(mock, found=earlier)
        sink = grafana(findings, tally)
        await sink.start()
        await tally.reached("grafana", "sent")
        findings.clear()
        sink.wake()
        await tally.reached("grafana", "sent", 2)
        await sink.stop()
    assert opened.call_count == 0
    assert [c.request.url.path for c in closed.calls] == ["/api/annotations/11"]


async def test_a_refused_patch_is_dropped_not_retried() -> None:
    findings = [finding("vllm-0")]
    tally = Tally()
    with respx.mock(assert_all_called=True) as mock:
        _, _, closed = routes(mock)
        closed.respond(404, json={"message": "Annotation not found"})
        sink = grafana(findings, tally)
        await sink.start()
        await tally.reached("grafana", "sent")
        findings.clear()
        sink.wake()
        await tally.reached("grafana", "rejected")
        # A later finding still gets its region: the refusal held nothing up.
        findings.append(finding("vllm-1"))
        sink.wake()
        await tally.reached("grafana", "sent", 2)
        await sink.stop()
    assert closed.call_count == 1


async def test_a_hanging_grafana_never_holds_a_diagnosis(tmp_path: Path) -> None:
    release, opened = asyncio.Event(), asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        await release.wait()
        if request.method == "POST":
            opened.set()
        return httpx.Response(200, json=[] if request.method == "GET" else ADDED)

    with fleet_prometheus(tmp_path / "prometheus") as prometheus:
        config = settings(prometheus, tmp_path, grafana={"url": GRAFANA, "timeout": "5m"})
        with respx.mock(assert_all_called=False) as mock:
            mock.route(host="127.0.0.1").pass_through()
            answered = mock.route(host="grafana").mock(side_effect=hang)
            async with serve(build(config)) as (client, services):
                response = await client.post("/webhook/alertmanager", json=sample("webhook-received.json"))
                await services.inbox.join()
                firing = (await client.get("/findings", params={"state": "firing"})).json()["findings"]
                assert response.status_code == 202
                assert len(firing) == 1
                release.set()
                await asyncio.wait_for(opened.wait(), 30)
    [post] = [c for c in answered.calls if c.request.method == "POST"]
    assert f"finding:{firing[0]['id']}" in body(post)["tags"]
