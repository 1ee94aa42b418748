"""End to end with real components: Alertmanager 0.25 routes an alert to a running diagnosd
(uvicorn on a loopback port), diagnosd diagnoses it against a real Prometheus, and that
Prometheus, scraping diagnosd's /metrics, answers a query for diagnosd_root_cause.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from diagnosd.api import create_app
from diagnosd.promlocal import free_port
from tests.serving import (
    HOOK_TOKEN,
    TOKEN,
    ThreadedServer,
    alertmanager,
    build,
    fleet_prometheus,
    settings,
    wait_until,
)

ALERT = {
    "alertname": "VLLMQueueBacklog",
    "severity": "warning",
    "namespace": "prod",
    "pod": "vllm-0",
    "model_name": "llama",
    "job": "vllm",
}


def _post_alert(am: str, starts: datetime, ends: datetime | None = None) -> None:
    alert: dict[str, Any] = {
        "labels": ALERT,
        "annotations": {"summary": "vLLM queue backlog on vllm-0"},
        "startsAt": starts.isoformat(),
        "generatorURL": "http://127.0.0.1:9090/graph",
    }
    if ends is not None:
        alert["endsAt"] = ends.isoformat()
    httpx.post(f"{am}/api/v2/alerts", json=[alert], timeout=5).raise_for_status()


def test_alertmanager_webhook_to_findings_metrics_and_prometheus(tmp_path: Path) -> None:
    port = free_port()
    api = {"Authorization": f"Bearer {TOKEN}"}
    with fleet_prometheus(tmp_path / "prometheus", scraping=port) as url:
        config = settings(url, tmp_path, auth={"api_tokens": [TOKEN], "webhook_tokens": [HOOK_TOKEN]})
        with ThreadedServer(create_app(build(config)), port) as server:
            hook = f"{server.url}/webhook/alertmanager"
            with alertmanager(tmp_path / "alertmanager", hook, {"authorization": {"credentials": HOOK_TOKEN}}) as am:
                starts = datetime.now(UTC).replace(microsecond=0)
                _post_alert(am, starts)

                def firing() -> list[dict[str, Any]]:
                    body = httpx.get(f"{server.url}/findings", params={"state": "firing"}, headers=api).json()
                    found: list[dict[str, Any]] = body["findings"]
                    return found

                [finding] = wait_until(firing, 20, "the finding from Alertmanager's webhook")
                assert (finding["symptom"], finding["cause"]) == ("queue_backlog", "kv_pool_full")
                assert finding["labels"] == {"namespace": "prod", "pod": "vllm-0"}
                assert finding["trigger"] == "alert"
                assert len(finding["alerts"]) == 1
                metrics = httpx.get(f"{server.url}/metrics", headers=api).text
                assert (
                    'diagnosd_root_cause{cause="kv_pool_full",namespace="prod",pod="vllm-0",'
                    'severity="warning",symptom="queue_backlog"} 1.0'
                ) in metrics
                assert 'diagnosd_webhook_deliveries_total{outcome="accepted"} 1.0' in metrics

                def scraped() -> list[dict[str, Any]]:
                    answer = httpx.get(f"{url}/api/v1/query", params={"query": "diagnosd_root_cause"}).json()
                    result: list[dict[str, Any]] = answer["data"]["result"]
                    return result

                [series] = wait_until(scraped, 20, "Prometheus to scrape diagnosd_root_cause")
                labels = series["metric"]
                assert {k: labels[k] for k in ("symptom", "cause", "severity", "namespace", "pod")} == {
                    "symptom": "queue_backlog",
                    "cause": "kv_pool_full",
                    "severity": "warning",
                    "namespace": "prod",
                    "pod": "vllm-0",
                }
                assert labels["job"] == "diagnosd"
                assert series["value"][1] == "1"

                _post_alert(am, starts, ends=datetime.now(UTC) - timedelta(seconds=1))

                def resolved() -> dict[str, Any] | None:
                    body = httpx.get(f"{server.url}/findings/{finding['id']}", headers=api).json()
                    return body if body["state"] == "resolved" else None

                done = wait_until(resolved, 20, "the resolved webhook to resolve the finding")
                assert done["resolved_by"] == "alert_resolved"
                metrics = httpx.get(f"{server.url}/metrics", headers=api).text
                assert "diagnosd_root_cause{" not in metrics
                assert 'diagnosd_diagnoses_total{outcome="ok",trigger="alert"} 1.0' in metrics
                wait_until(lambda: not scraped(), 20, "diagnosd_root_cause to go stale in Prometheus")
