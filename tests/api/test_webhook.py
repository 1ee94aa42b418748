"""POST /webhook/alertmanager with bodies captured from a real Alertmanager 0.25: quick 202s,
background diagnoses against a real Prometheus, each distinct alert state diagnosed once (across
restarts too), resolution, and every way a delivery can be refused while the daemon keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends

from diagnosd.api.deps import ServicesDep
from diagnosd.api.routes.webhook import IntakeRoute, receive
from diagnosd.api.schemas import Payload, ReceiptOut
from diagnosd.daemon.compose import Runtime, Services
from tests.fakes.prometheus import in_front_of
from tests.serving import HOOK_TOKEN, TOKEN, build, counted, sample, serve, settings

HOOK = "/webhook/alertmanager"


def diagnoses(services: Services, outcome: str = "ok") -> float:
    return counted(services.metrics.diagnoses, trigger="alert", outcome=outcome)


def deliveries(services: Services, outcome: str) -> float:
    return counted(services.metrics.deliveries, outcome=outcome)


@asynccontextmanager
async def daemon(built: Runtime, token: str | None = None) -> AsyncIterator[tuple[httpx.AsyncClient, Services]]:
    async with serve(built, token) as (client, services):
        yield client, services


async def deliver(client: httpx.AsyncClient, services: Services, body: Any, **kwargs: Any) -> httpx.Response:
    response = await client.post(HOOK, json=body, **kwargs)
    await services.inbox.join()
    return response


async def test_a_real_delivery_is_diagnosed_in_the_background(fleet_url: str, tmp_path: Path) -> None:
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        response = await deliver(client, services, sample("webhook-received.json"))
        findings = (await client.get("/findings")).json()
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 202
    assert response.json() == {"queued": 1, "duplicates": 0, "skipped": [], "truncated_alerts": 0}
    assert diagnoses(services) == 1
    [finding] = findings["findings"]
    assert (finding["symptom"], finding["cause"], finding["state"]) == ("queue_backlog", "kv_pool_full", "firing")
    assert finding["labels"] == {"namespace": "prod", "pod": "vllm-0"}
    assert finding["alerts"] == ["0d6ac019b0dad439"]
    assert finding["trigger"] == "alert"
    assert finding["root_cause"]["evidence"][0]["value"] == pytest.approx(0.95)
    target = 'namespace="prod",pod="vllm-0"'
    assert (
        f'diagnosd_root_cause{{cause="kv_pool_full",{target},severity="warning",symptom="queue_backlog"}} 1.0'
        in metrics
    )
    assert f'diagnosd_symptom_active{{{target},symptom="queue_backlog"}} 1.0' in metrics
    assert f'diagnosd_check_value{{check="kv_pool_full",{target},symptom="queue_backlog"}} 0.95' in metrics


async def test_the_scope_is_the_target_labels_and_model_name_only(fleet_url: str, tmp_path: Path) -> None:
    body = sample("webhook-received.json")
    # job="vllm" is on the series, severity and alertname are not: none of them may narrow the scope.
    body["alerts"][0]["labels"].update({"job": "other", "instance": "10.0.0.1:8000", "team": "x"})
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        await deliver(client, services, body)
        [job] = services.memory.alerts_by_outcome("done")
    assert job.request["scope"] == {"namespace": "prod", "pod": "vllm-0", "model_name": "llama"}


async def test_duplicate_and_resent_deliveries_are_diagnosed_once(fleet_url: str, tmp_path: Path) -> None:
    body = sample("webhook-received.json")
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        first = await deliver(client, services, body)
        twin = await deliver(client, services, body)  # Alertmanager HA: the same delivery from the peer
        resent = copy.deepcopy(body)
        resent["alerts"][0]["annotations"]["description"] = "vllm-0 has 31 waiting requests"  # repeat_interval
        again = await deliver(client, services, resent)
    assert first.json()["queued"] == 1
    assert twin.json() == {"queued": 0, "duplicates": 1, "skipped": [], "truncated_alerts": 0}
    assert again.json()["duplicates"] == 1
    assert diagnoses(services) == 1
    assert deliveries(services, "duplicate") == 2


async def test_concurrent_twins_are_diagnosed_once(fleet_url: str, tmp_path: Path) -> None:
    body = sample("webhook-received.json")
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        responses = await asyncio.gather(*(client.post(HOOK, json=body) for _ in range(5)))
        await services.inbox.join()
    assert sorted(r.json()["queued"] for r in responses) == [0, 0, 0, 0, 1]
    assert diagnoses(services) == 1


async def test_a_restart_between_deliveries_keeps_the_memory_and_the_finding(fleet_url: str, tmp_path: Path) -> None:
    config = settings(fleet_url, tmp_path)
    body = sample("webhook-received.json")
    async with daemon(build(config)) as (client, services):
        assert (await deliver(client, services, body)).json()["queued"] == 1
        assert diagnoses(services) == 1
    async with daemon(build(config)) as (client, services):
        after = await deliver(client, services, body)
        findings = (await client.get("/findings", params={"state": "firing"})).json()["findings"]
        metrics = (await client.get("/metrics")).text
    assert after.json()["duplicates"] == 1
    assert diagnoses(services) == 0
    assert [(f["cause"], f["labels"]["pod"]) for f in findings] == [("kv_pool_full", "vllm-0")]
    assert 'diagnosd_root_cause{cause="kv_pool_full"' in metrics


async def test_a_resolved_alert_resolves_the_findings_it_caused(fleet_url: str, tmp_path: Path) -> None:
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        await deliver(client, services, sample("webhook-received.json"))
        response = await deliver(client, services, sample("webhook-received-resolved.json"))
        [finding] = (await client.get("/findings")).json()["findings"]
        metrics = (await client.get("/metrics")).text
    assert response.json()["queued"] == 1
    assert diagnoses(services) == 1  # resolution diagnoses nothing
    assert finding["state"] == "resolved"
    assert finding["resolved_by"] == "alert_resolved"
    assert finding["resolved_at"] is not None
    assert "diagnosd_root_cause{" not in metrics


async def test_resolved_alerts_inside_a_firing_group_are_not_diagnosed(fleet_url: str, tmp_path: Path) -> None:
    body = sample("webhook-example-mixed.json")  # status firing: one alert resolved, one firing
    config = settings(fleet_url, tmp_path, webhook={"alertname_map": {"VLLMHighTTFT": "queue_backlog"}})
    async with daemon(build(config)) as (client, services):
        response = await deliver(client, services, body)
        done = {r.key[1]: r.request["scope"] for r in services.memory.alerts_by_outcome("done")}
    assert response.json()["queued"] == 2
    assert diagnoses(services) == 1
    assert done == {
        "resolved": {
            "namespace": "llm-serving",
            "pod": "vllm-llama-8b-0",
            "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        },
        "firing": {
            "namespace": "llm-serving",
            "pod": "vllm-llama-8b-1",
            "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        },
    }


async def test_symptom_label_unmapped_and_unknown_symptoms(fleet_url: str, tmp_path: Path) -> None:
    body = sample("webhook-received.json")
    alert = body["alerts"][0]
    by_label = copy.deepcopy(alert) | {"fingerprint": "1111111111111111"}
    by_label["labels"] = {**alert["labels"], "alertname": "Custom", "symptom": "queue_backlog"}
    unknown = copy.deepcopy(alert) | {"fingerprint": "2222222222222222"}
    unknown["labels"] = {**alert["labels"], "symptom": "no_such_symptom"}
    unmapped = copy.deepcopy(alert) | {"fingerprint": "3333333333333333"}
    unmapped["labels"] = {**alert["labels"], "alertname": "SomethingElse"}
    body["alerts"] = [by_label, unknown, unmapped]
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        response = await deliver(client, services, body)
    assert response.status_code == 202
    assert response.json()["queued"] == 1
    assert [(s["fingerprint"], s["reason"]) for s in response.json()["skipped"]] == [
        ("2222222222222222", "unknown_symptom"),
        ("3333333333333333", "unmapped"),
    ]
    assert diagnoses(services) == 1


async def test_newer_fields_are_tolerated(fleet_url: str, tmp_path: Path) -> None:
    body = sample("webhook-received.json") | {"newTopLevel": {"x": 1}}
    body["alerts"][0] |= {"newAlertField": [1, 2], "silencedBy": [], "inhibitedBy": []}
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        response = await deliver(client, services, body)
    assert response.status_code == 202
    assert response.json()["queued"] == 1


async def test_truncated_groups_are_taken_as_they_come(fleet_url: str, tmp_path: Path) -> None:
    body = sample("webhook-received.json") | {"truncatedAlerts": 7}
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        response = await deliver(client, services, body)
    assert response.json()["truncated_alerts"] == 7
    assert response.json()["queued"] == 1


MALFORMED: list[tuple[str, bytes, int, str]] = [
    ("not json", b"{not json", 400, "not valid JSON"),
    ("empty", b"", 422, "body: Field required"),
    ("array", b"[]", 422, "body"),
    ("no alerts", b'{"version": "4", "status": "firing"}', 422, "body.alerts: Field required"),
    ("bad status", b'{"version": "4", "status": "burning", "alerts": []}', 422, "body.status"),
    (
        "bad startsAt",
        b'{"version":"4","status":"firing","alerts":[{"status":"firing","labels":{},"startsAt":"soon"}]}',
        422,
        "body.alerts.0.startsAt",
    ),
    (
        "label not a string",
        b'{"version":"4","status":"firing","alerts":[{"status":"firing","labels":{"a":1},"startsAt":"2026-01-01T00:00:00Z"}]}',
        422,
        "body.alerts.0.labels.a",
    ),
    (
        "endsAt a number",
        b'{"version":"4","status":"firing","alerts":[{"status":"firing","labels":{},"startsAt":"2026-01-01T00:00:00Z","endsAt":0}]}',
        422,
        "body.alerts.0.endsAt: Value error, expected an RFC3339 time string",
    ),
    ("another version", b'{"version":"3","status":"firing","alerts":[]}', 400, "payload version '3' is not supported"),
    ("not UTF-8", b'{"version":"4","status":"firing","alerts":[],"receiver":"\xff"}', 400, "not UTF-8"),
    ("nested too deeply", b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
]


@pytest.mark.parametrize(("name", "raw", "status", "message"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_malformed_bodies_get_a_precise_error_and_the_daemon_keeps_serving(
    fleet_url: str, tmp_path: Path, name: str, raw: bytes, status: int, message: str
) -> None:
    async with daemon(build(settings(fleet_url, tmp_path))) as (client, services):
        response = await client.post(HOOK, content=raw, headers={"Content-Type": "application/json"})
        after = await deliver(client, services, sample("webhook-received.json"))
    assert response.status_code == status, response.text
    assert message in response.json()["message"]
    assert response.json()["error"] in ("invalid_json", "invalid_request", "bad_request")
    assert '"input"' not in response.text  # the body is never echoed back
    assert deliveries(services, "malformed") == 1
    assert after.status_code == 202
    assert diagnoses(services) == 1


async def test_an_oversized_body_is_413(fleet_url: str, tmp_path: Path) -> None:
    body = sample("webhook-received.json")
    body["alerts"][0]["annotations"]["description"] = "x" * 5000
    config = settings(fleet_url, tmp_path, webhook={"max_body_bytes": 4096})
    async with daemon(build(config)) as (client, services):
        response = await client.post(HOOK, json=body)

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b" " * 1000

        chunked = await client.post(HOOK, content=chunks(), headers={"Content-Type": "application/json"})
        healthy = await client.get("/healthz")
    assert response.status_code == 413
    assert chunked.status_code == 413
    assert response.json()["error"] == "too_large"
    assert deliveries(services, "too_large") == 2
    assert healthy.status_code == 200


def storm(count: int) -> dict[str, Any]:
    """One group of `count` distinct firing alerts of queue_backlog, one pod each."""
    body = sample("webhook-received.json")
    [alert] = body["alerts"]
    body["alerts"] = [
        copy.deepcopy(alert) | {"fingerprint": f"{n:016x}", "labels": {**alert["labels"], "pod": f"vllm-{n}"}}
        for n in range(count)
    ]
    return body


async def test_a_delivery_bigger_than_the_queue_is_taken_whole(fleet_url: str, tmp_path: Path) -> None:
    config = settings(fleet_url, tmp_path, webhook={"queue_size": 256})
    async with daemon(build(config)) as (client, services):
        await services.inbox.stop()  # no worker: the 300 jobs stay waiting
        response = await client.post(HOOK, json=storm(300))
        queued = services.memory.alerts_by_outcome("queued")
    assert response.status_code == 202
    assert response.json()["queued"] == 300
    assert len(queued) == 300


async def test_a_backlog_over_its_bound_answers_503_so_alertmanager_retries(fleet_url: str, tmp_path: Path) -> None:
    mapped = {"VLLMHighTTFT": "queue_backlog", "VLLMQueueBacklog": "queue_backlog"}
    config = settings(fleet_url, tmp_path, webhook={"queue_size": 1, "alertname_map": mapped, "coalesce_window": "2s"})
    async with daemon(build(config)) as (client, services):
        await services.inbox.stop()
        first = await client.post(HOOK, json=sample("webhook-example.json"))  # two alerts, one batch: one job
        other_model = sample("webhook-received.json")
        other_model["alerts"][0]["fingerprint"] = "0123456789abcdef"  # another alert than the joining one
        same_model = sample("webhook-received.json")
        model = sample("webhook-example.json")["alerts"][0]["labels"]["model_name"]
        same_model["alerts"][0]["labels"]["model_name"] = model
        joining = await client.post(HOOK, json=same_model)  # another pod of that model: joins the open batch
        apart = await client.post(HOOK, json=other_model)  # another model is a batch, a job, of its own
        response = await client.post(HOOK, json=sample("webhook-example-resolved.json"))  # two more jobs
        resent = await client.post(HOOK, json=sample("webhook-example.json"))
        queued = {r.key[1] for r in services.memory.alerts_by_outcome("queued")}
    assert (first.status_code, first.json()["queued"]) == (202, 2)
    assert (joining.status_code, joining.json()["queued"]) == (202, 1)
    assert apart.status_code == 503
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json()["error"] == "queue_full"
    assert queued == {"firing"}  # the refused resolutions were not recorded: Alertmanager brings them again
    assert deliveries(services, "queue_full") == 2
    assert (resent.status_code, resent.json()["duplicates"]) == (202, 2)  # re-sends are never refused


async def test_the_webhook_answers_before_the_diagnosis_is_done(fleet_url: str, tmp_path: Path) -> None:
    release = asyncio.Event()

    async def hold(request: httpx.Request) -> None:
        await release.wait()

    built = build(settings(fleet_url, tmp_path))
    async with in_front_of(fleet_url, hold), daemon(built) as (client, services):
        response = await asyncio.wait_for(client.post(HOOK, json=sample("webhook-received.json")), timeout=2)
        pending = (await client.get("/findings")).json()["count"]
        release.set()
        await services.inbox.join()
        done = (await client.get("/findings")).json()["count"]
    assert response.status_code == 202
    assert pending == 0
    assert done == 1


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (f"Bearer {HOOK_TOKEN}", 202),
        (_basic("alertmanager", HOOK_TOKEN), 202),
        (f"bearer {HOOK_TOKEN}", 202),
        (None, 401),
        ("Bearer wrong-token-0123456789abcdef", 401),
        (f"Bearer {TOKEN}", 401),  # the API token is not a webhook credential once those are set
        (_basic("alertmanager", "wrong"), 401),
        (_basic("someone", HOOK_TOKEN), 401),
        ("Basic !!!notbase64", 401),
    ],
)
async def test_webhook_auth(fleet_url: str, tmp_path: Path, authorization: str | None, status: int) -> None:
    auth = {
        "api_tokens": [TOKEN],
        "webhook_tokens": [HOOK_TOKEN],
        "webhook_username": "alertmanager",
        "webhook_password": HOOK_TOKEN,
    }
    headers = {"Authorization": authorization} if authorization else {}
    async with daemon(build(settings(fleet_url, tmp_path, auth=auth))) as (client, services):
        response = await deliver(client, services, sample("webhook-received.json"), headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.headers["www-authenticate"].endswith('realm="diagnosd"')
        assert HOOK_TOKEN not in response.text
        assert TOKEN not in response.text
        assert deliveries(services, "unauthorized") == 1
        assert diagnoses(services) == 0


async def test_credentials_are_checked_before_the_body_is_read(fleet_url: str, tmp_path: Path) -> None:
    # A caller without credentials learns nothing about what the webhook takes, malformed or not.
    auth = {"webhook_tokens": [HOOK_TOKEN]}
    async with daemon(build(settings(fleet_url, tmp_path, auth=auth))) as (client, services):
        unread = await client.post(HOOK, content=b"{not json", headers={"Content-Type": "application/json"})
        wrong = await client.post(HOOK, content=b"[]", headers={"Content-Type": "text/plain"})
    assert (unread.status_code, wrong.status_code) == (401, 401)
    assert unread.json()["error"] == "unauthorized"
    assert deliveries(services, "unauthorized") == 2
    assert deliveries(services, "malformed") == 0


def test_the_webhook_route_refuses_an_endpoint_it_would_not_call_rightly() -> None:
    # The route passes its endpoint the payload and the services only: a dependency declared on
    # the endpoint would be described by the schema and never run.
    router = APIRouter(route_class=IntakeRoute)

    async def with_a_query(payload: Payload, svc: ServicesDep, verbose: bool = False) -> ReceiptOut:
        raise AssertionError("never called")

    async def with_a_dependency(payload: Payload, svc: ServicesDep, _: None = Depends(lambda: None)) -> ReceiptOut:
        raise AssertionError("never called")

    for endpoint in (with_a_query, with_a_dependency):
        with pytest.raises(TypeError, match="may take only"):
            router.add_api_route(HOOK, endpoint, methods=["POST"])
    router.add_api_route(HOOK, receive, methods=["POST"])  # the one it serves


async def test_queued_alerts_survive_a_restart_and_are_diagnosed_after_it(fleet_url: str, tmp_path: Path) -> None:
    config = settings(fleet_url, tmp_path)
    async with daemon(build(config)) as (client, services):
        await services.inbox.stop()  # no worker: the job waits in the queue when the daemon stops
        accepted = await client.post(HOOK, json=sample("webhook-received.json"))
        assert [r.outcome for r in services.memory.alerts_by_outcome("queued")] == ["queued"]
    async with daemon(build(config)) as (client, services):
        await services.inbox.join()
        findings = (await client.get("/findings")).json()["findings"]
        twin = await deliver(client, services, sample("webhook-received.json"))
    assert accepted.json()["queued"] == 1
    assert [f["cause"] for f in findings] == ["kv_pool_full"]
    assert diagnoses(services) == 1
    assert twin.json()["duplicates"] == 1


async def test_a_resolution_overtaking_its_diagnosis_leaves_no_finding(fleet_url: str, tmp_path: Path) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(request: httpx.Request) -> None:
        started.set()
        await release.wait()

    firing = sample("webhook-received.json")
    resolved = copy.deepcopy(firing)
    resolved["alerts"][0] |= {"status": "resolved", "endsAt": "2026-11-29T14:30:00Z"}
    built = build(settings(fleet_url, tmp_path))
    async with in_front_of(fleet_url, hold), daemon(built) as (client, services):
        await client.post(HOOK, json=firing)  # one worker diagnoses it, held by `release`
        await asyncio.wait_for(started.wait(), timeout=5)  # once its window closed
        await client.post(HOOK, json=resolved)  # the other worker resolves meanwhile
        async with asyncio.timeout(5):
            while not services.memory.alerts_by_outcome("done"):  # noqa: ASYNC110 - another task's progress
                await asyncio.sleep(0.01)
        release.set()
        await services.inbox.join()
        outcomes = {r.key[1]: r.outcome for o in ("done", "superseded") for r in services.memory.alerts_by_outcome(o)}
        findings = (await client.get("/findings")).json()["count"]
    assert outcomes == {"firing": "superseded", "resolved": "done"}
    assert findings == 0
    assert diagnoses(services) == 1
