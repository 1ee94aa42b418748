"""The read-only routes: /symptoms, /findings filters, /healthz, /readyz, /metrics, OpenAPI, API auth."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serving import TOKEN, build, sample, serve, settings

OPERATIONS = {
    ("get", "/diagnose/{symptom}"): "diagnose",
    ("get", "/triage"): "triage",
    ("get", "/symptoms"): "listSymptoms",
    ("get", "/symptoms/{symptom}"): "getSymptom",
    ("get", "/findings"): "listFindings",
    ("get", "/findings/{finding_id}"): "getFinding",
    ("post", "/webhook/alertmanager"): "receiveAlertmanagerWebhook",
    ("get", "/healthz"): "healthz",
    ("get", "/readyz"): "readyz",
    ("get", "/metrics"): "metrics",
}


async def test_openapi_has_every_route_with_a_stable_operation_id(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        spec = (await client.get("/openapi.json")).json()
        docs = await client.get("/docs")
    found = {(method, path): op["operationId"] for path, item in spec["paths"].items() for method, op in item.items()}
    assert found == OPERATIONS
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()
    body = spec["paths"]["/webhook/alertmanager"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/Payload")


async def test_symptoms_list_and_detail(fleet_url: str, tmp_path: Path) -> None:
    config = settings(fleet_url, tmp_path, params={"queue_backlog": {"waiting": 25}})
    async with serve(build(config)) as (client, _):
        listed = (await client.get("/symptoms")).json()
        detail = (await client.get("/symptoms/queue_backlog")).json()
        missing = await client.get("/symptoms/nope")
    assert [s["id"] for s in listed] == ["queue_backlog", "kv_hit_low"]
    assert listed[0]["target"] == ["namespace", "pod"]
    assert listed[0]["causes"] == ["kv_pool_full", "requests_not_released"]
    params = {p["name"]: (p["default"], p["value"]) for p in detail["params"]}
    assert params["waiting"] == (10, 25)
    assert params["kv_full"] == (0.9, 0.9)
    assert [(n["id"], n["kind"], n["depth"]) for n in detail["nodes"]] == [
        ("kv_pool_full", "check", 1),
        ("kv_growth", "check", 2),
        ("requests_not_released", "manual", 1),
    ]
    assert missing.status_code == 404
    assert missing.json()["known"] == ["queue_backlog", "kv_hit_low"]


async def test_findings_filters_and_detail(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path, findings={"for": "0s"}))) as (client, services):
        await services.scheduler.run_round()
        everything = (await client.get("/findings")).json()
        by_symptom = (await client.get("/findings", params={"symptom": "kv_hit_low"})).json()
        by_cause = (await client.get("/findings", params={"cause": "kv_pool_full"})).json()
        by_label = (await client.get("/findings", params=[("label", "pod=vllm-1")])).json()
        none = (await client.get("/findings", params=[("label", "pod=vllm-9")])).json()
        resolved = (await client.get("/findings", params={"state": "resolved"})).json()
        limited = (await client.get("/findings", params={"limit": 1})).json()
        later = (await client.get("/findings", params={"until": "2025-01-01T00:00:00Z"})).json()
        one = await client.get(f"/findings/{everything['findings'][0]['id']}")
        unknown = await client.get("/findings/0123456789abcdef")
        bad = await client.get("/findings", params=[("label", "no equals")])
    pairs = sorted((f["symptom"], f["cause"], f["labels"]["pod"]) for f in everything["findings"])
    assert pairs == [("kv_hit_low", "prefix_cache_disabled", "vllm-1"), ("queue_backlog", "kv_pool_full", "vllm-0")]
    assert [f["cause"] for f in by_symptom["findings"]] == ["prefix_cache_disabled"]
    assert [f["labels"]["pod"] for f in by_cause["findings"]] == ["vllm-0"]
    assert [f["cause"] for f in by_label["findings"]] == ["prefix_cache_disabled"]
    assert none["count"] == 0
    assert resolved["count"] == 0
    assert (limited["count"], limited["truncated"]) == (1, True)
    assert later["count"] == 0
    assert one.status_code == 200
    assert one.json()["episodes"] == []
    assert one.json()["trigger"] == "round"
    assert unknown.status_code == 404
    assert unknown.json()["error"] == "unknown_finding"
    assert bad.status_code == 400


async def test_readyz_and_healthz(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        ready = await client.get("/readyz")
        health = await client.get("/healthz")
    assert health.json() == {"status": "ok"}
    assert ready.status_code == 200
    checks = ready.json()["checks"]
    assert checks["rules"] == {"ok": True, "detail": "2 trees loaded"}
    assert checks["prometheus"]["ok"] is True
    assert checks["store"]["detail"] == "open (journal wal)"


@pytest.mark.parametrize(
    ("path", "authorization", "status"),
    [
        ("/symptoms", None, 401),
        ("/symptoms", f"Bearer {TOKEN}", 200),
        ("/symptoms", "Bearer nope", 401),
        ("/symptoms", f"Basic {TOKEN}", 401),
        ("/findings", None, 401),
        ("/metrics", None, 401),
        ("/metrics", f"Bearer {TOKEN}", 200),
        ("/diagnose/queue_backlog", None, 401),
        ("/diagnose/nope", None, 401),  # no symptom list without a token
        ("/triage", None, 401),
        ("/healthz", None, 200),
        ("/readyz", None, 200),
        ("/openapi.json", None, 200),
    ],
)
async def test_api_tokens(fleet_url: str, tmp_path: Path, path: str, authorization: str | None, status: int) -> None:
    config = settings(fleet_url, tmp_path, auth={"api_tokens": ["another-token-0123456789", TOKEN]})
    headers = {"Authorization": authorization} if authorization else {}
    async with serve(build(config)) as (client, _):
        response = await client.get(path, headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.headers["www-authenticate"] == 'Bearer realm="diagnosd"'
        assert "known" not in response.json()


async def test_without_webhook_credentials_the_webhook_takes_the_api_token(fleet_url: str, tmp_path: Path) -> None:
    config = settings(fleet_url, tmp_path, auth={"api_tokens": [TOKEN]})
    async with serve(build(config)) as (client, services):
        refused = await client.post("/webhook/alertmanager", json=sample("webhook-received.json"))
        taken = await client.post(
            "/webhook/alertmanager",
            json=sample("webhook-received.json"),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        await services.inbox.join()
    assert refused.status_code == 401
    assert taken.status_code == 202
