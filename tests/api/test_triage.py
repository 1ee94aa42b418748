"""GET /triage against a real Prometheus holding the fixture fleet's history: worst first, text, scope, 503."""

from __future__ import annotations

from pathlib import Path

from diagnosd.api.routes.triage import TriageOut
from diagnosd.promlocal import free_port
from tests.serving import AT, build, counted, serve, settings


async def test_triage_lists_every_symptom_worst_first(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, services):
        response = await client.get("/triage", params={"at": AT.isoformat()})
        queries = counted(services.metrics.queries, endpoint="query")
    assert response.status_code == 200, response.text
    body = response.json()
    TriageOut.model_validate(body)  # the documented wire model is exactly what is sent
    assert body["found"] is True
    assert [p["symptom"] for p in body["present"]] == ["queue_backlog", "kv_hit_low"]
    backlog, hit_low = body["present"]
    assert backlog["targets"] == 2
    assert backlog["seen"] == 3
    hits = {h["labels"]["pod"]: h for h in backlog["hits"]}
    assert list(hits) == ["vllm-0", "vllm-2"]  # the one with a cause first
    assert hits["vllm-0"]["cause"]["cause"] == "kv_pool_full"
    assert hits["vllm-0"]["evidence"]["check"] == "kv_pool_full"
    assert hits["vllm-2"]["cause"] is None
    assert hits["vllm-2"]["evidence"]["check"] == "detect"
    assert [h["labels"]["pod"] for h in hit_low["hits"]] == ["vllm-1"]
    assert hit_low["hits"][0]["cause"]["cause"] == "prefix_cache_disabled"
    assert body["clear"] == []
    assert body["unknown"] == []
    assert body["evaluated_at"] == "2026-01-02T01:00:00Z"
    assert body["queries"] == queries  # every query went through the metered source


async def test_triage_text_board_and_scope(fleet_url: str, tmp_path: Path) -> None:
    params = {"pod": "vllm-1", "at": AT.isoformat(), "format": "text"}
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        response = await client.get("/triage", params=params)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert "scope: pod='vllm-1'" in text
    assert "▲ kv_hit_low [warning] — 1 target: KV cache hit rate below 30%" in text
    assert "namespace=prod pod=vllm-1 → prefix_cache_disabled [warning] Prefix caching is disabled" in text
    assert "prefix_cache_disabled: 1 (threshold > 0.5)" in text
    assert "· clear (1): queue_backlog" in text
    assert "vllm-0" not in text


async def test_triage_with_prometheus_unreachable_is_503(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with serve(build(settings(url, tmp_path))) as (client, _):
        response = await client.get("/triage")
    assert response.status_code == 503
    assert response.json()["error"] == "prometheus_unavailable"
