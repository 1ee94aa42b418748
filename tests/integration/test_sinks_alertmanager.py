"""Derived alerts against real Alertmanagers 0.25 on loopback: two (an HA pair, each told
directly, as Prometheus tells every Alertmanager it knows) both show DiagnosdRootCause with its
labels and annotations, then no longer once the finding resolves; an Alertmanager down at first
gets the alert once it is up; and the whole daemon, from an alert on its webhook to the derived
alert and back to resolved, with a real Prometheus behind it.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import httpx

from diagnosd.findings.lifecycle import Finding
from diagnosd.promlocal import free_port
from diagnosd.sinks.alertmanager import ALERTNAME, AlertmanagerConfig, AlertmanagerSink
from tests.serving import build, fleet_prometheus, run_alertmanager, sample, serve, settings
from tests.sinks.builders import Tally, finding, words

T = TypeVar("T")
# Alertmanager keeps what it is sent; no receiver needs to be reached for its API to show it.
CONFIG = {"route": {"receiver": "nobody"}, "receivers": [{"name": "nobody"}]}
EXTERNAL = "https://diagnosd.example"


async def eventually(probe: Callable[[], Awaitable[T]], what: str, seconds: float = 30) -> T:
    """Ask a real process until it answers truthy (it has no event to wait on); fail naming `what`."""

    async def poll() -> T:
        while not (answer := await probe()):  # noqa: ASYNC110 - another process, which sends no event
            await asyncio.sleep(0.05)
        return answer

    try:
        return await asyncio.wait_for(poll(), seconds)
    except TimeoutError:
        raise AssertionError(f"timed out after {seconds:g}s waiting for {what}") from None


def derived(am: str) -> Callable[[], Awaitable[list[dict[str, Any]]]]:
    """Alertmanager's active DiagnosdRootCause alerts (GET /api/v2/alerts leaves out resolved ones)."""

    async def ask() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(timeout=5) as client:
            answer = await client.get(f"{am}/api/v2/alerts", params={"filter": f'alertname="{ALERTNAME}"'})
        answer.raise_for_status()
        found: list[dict[str, Any]] = answer.json()
        return found

    return ask


def gone(am: str) -> Callable[[], Awaitable[bool]]:
    async def ask() -> bool:
        return not await derived(am)()

    return ask


def sink(urls: list[str], findings: list[Finding], tally: Tally) -> AlertmanagerSink:
    config = AlertmanagerConfig(urls=tuple(urls), backoff=0.05, external_url=EXTERNAL)
    return AlertmanagerSink(config, lambda: findings, words, tally)


async def test_both_alertmanagers_show_the_derived_alert_then_see_it_resolved(tmp_path: Path) -> None:
    findings = [finding("vllm-0")]
    f = findings[0]
    tally = Tally()
    with ExitStack() as stack:
        ams = [stack.enter_context(run_alertmanager(tmp_path / name, CONFIG)) for name in ("am-a", "am-b")]
        pushing = sink(ams, findings, tally)
        await pushing.start()
        try:
            shown = [await eventually(derived(am), f"the derived alert on {am}") for am in ams]
            findings.clear()
            pushing.wake()
            for am in ams:
                await eventually(gone(am), f"{am} to see the derived alert resolved")
        finally:
            await pushing.stop()
    for [alert] in shown:
        assert alert["labels"] == {
            "alertname": ALERTNAME,
            "symptom": "queue_backlog",
            "cause": "kv_pool_full",
            "severity": "warning",
            "namespace": "prod",
            "pod": "vllm-0",
        }
        assert alert["annotations"]["summary"].startswith("root cause: kv_pool_full title")
        assert alert["annotations"]["evidence"] == "kv_pool_full: 0.95 (threshold > 0.9)"
        assert alert["annotations"]["remediation"] == "fix it"
        assert alert["generatorURL"] == f"{EXTERNAL}/findings/{f.fingerprint}"
        assert alert["status"]["state"] == "active"
        assert datetime.fromisoformat(alert["startsAt"]) == f.phase.fired_at
        # Valid for 4 resend intervals from its post: in the future, so Alertmanager holds it active.
        assert datetime.fromisoformat(alert["endsAt"]) > datetime.fromisoformat(alert["updatedAt"])
    assert tally["alertmanager", "sent"] >= 4
    assert tally["alertmanager", "failed"] == 0


async def test_an_alertmanager_down_at_first_gets_the_alert_once_it_is_up(tmp_path: Path) -> None:
    port = free_port()
    am = f"http://127.0.0.1:{port}"
    tally = Tally()
    pushing = sink([am], [finding("vllm-0")], tally)
    await pushing.start()
    try:
        await tally.reached("alertmanager", "failed")
        with run_alertmanager(tmp_path / "am", CONFIG, port=port):
            [alert] = await eventually(derived(am), "the derived alert after Alertmanager came up")
    finally:
        await pushing.stop()
    assert alert["labels"]["pod"] == "vllm-0"
    assert tally["alertmanager", "sent"] >= 1


def webhook(status: str) -> dict[str, Any]:
    """The delivery a real Alertmanager sent for VLLMQueueBacklog on vllm-0 (firing or resolved)."""
    body = copy.deepcopy(sample("webhook-received.json" if status == "firing" else "webhook-received-resolved.json"))
    assert isinstance(body, dict)
    return body


async def test_the_daemon_derives_the_alert_from_a_webhook_alert_and_resolves_it(tmp_path: Path) -> None:
    with ExitStack() as stack:
        prometheus = stack.enter_context(fleet_prometheus(tmp_path / "prometheus"))
        ams = [stack.enter_context(run_alertmanager(tmp_path / name, CONFIG)) for name in ("am-a", "am-b")]
        config = settings(
            prometheus,
            tmp_path,
            server={"external_url": EXTERNAL},
            alertmanager={"urls": ams, "language": "zh"},
        )
        async with serve(build(config)) as (client, services):
            assert (await client.post("/webhook/alertmanager", json=webhook("firing"))).status_code == 202
            await services.inbox.join()
            [finding_out] = (await client.get("/findings", params={"state": "firing"})).json()["findings"]
            shown = [await eventually(derived(am), f"the derived alert on {am}") for am in ams]
            assert (await client.post("/webhook/alertmanager", json=webhook("resolved"))).status_code == 202
            await services.inbox.join()
            for am in ams:
                await eventually(gone(am), f"{am} to see the derived alert resolved")
            metrics = (await client.get("/metrics")).text
    for [alert] in shown:
        assert {k: alert["labels"][k] for k in ("alertname", "symptom", "cause", "severity", "pod")} == {
            "alertname": ALERTNAME,
            "symptom": "queue_backlog",
            "cause": "kv_pool_full",
            "severity": "warning",
            "pod": "vllm-0",
        }
        assert alert["generatorURL"] == f"{EXTERNAL}/findings/{finding_out['id']}"
        assert alert["annotations"]["summary"].startswith("根因：")
    assert 'diagnosd_sink_posts_total{outcome="sent",sink="alertmanager"}' in metrics
