"""diagnosd's own derived alert routed back to its webhook (a route that sends every alert to
diagnosd, the loop docs/deploy.md warns of): a real Alertmanager 0.25 receives DiagnosdRootCause
from the daemon's sink and delivers it to the daemon's webhook, which skips it with a reason and
diagnoses nothing more."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx

from diagnosd.api import create_app
from diagnosd.daemon.alertmanager.memory import DeliveryMemory
from diagnosd.promlocal import free_port
from diagnosd.storage import open_database
from tests.serving import (
    ThreadedServer,
    build,
    counter,
    fleet_prometheus,
    run_alertmanager,
    sample,
    settings,
    wait_until,
)


def test_the_derived_alert_coming_back_is_skipped_as_diagnosd_s_own(tmp_path: Path) -> None:
    port = free_port()
    everything_to_diagnosd = {
        "route": {"receiver": "diagnosd", "group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [
            {"name": "diagnosd", "webhook_configs": [{"url": f"http://127.0.0.1:{port}/webhook/alertmanager"}]}
        ],
    }
    with ExitStack() as stack:
        prometheus = stack.enter_context(fleet_prometheus(tmp_path / "prometheus"))
        am = stack.enter_context(run_alertmanager(tmp_path / "am", everything_to_diagnosd))
        config = settings(prometheus, tmp_path, alertmanager={"urls": [am]})
        server = stack.enter_context(ThreadedServer(create_app(build(config)), port=port))
        hook = f"{server.url}/webhook/alertmanager"
        assert httpx.post(hook, json=sample("webhook-received.json"), timeout=5).status_code == 202

        def own_alerts_skipped() -> float:
            text = httpx.get(f"{server.url}/metrics", timeout=5).text
            return counter(text, "diagnosd_webhook_alerts_total", outcome="own_alert")

        wait_until(own_alerts_skipped, 30, "the derived alert to come back and be skipped")
        metrics = httpx.get(f"{server.url}/metrics", timeout=5).text
    assert counter(metrics, "diagnosd_diagnoses_total", trigger="alert") == 1
    assert counter(metrics, "diagnosd_webhook_alerts_total", outcome="queued") == 1
    database = open_database(tmp_path / "findings.db")
    try:
        remembered = DeliveryMemory(database).alerts_by_outcome("done")
    finally:
        database.close()
    assert [r.request["alertname"] for r in remembered] == ["VLLMQueueBacklog"]  # the derived one never queued
