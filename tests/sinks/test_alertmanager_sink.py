"""The Alertmanager sink: the postableAlert it builds, and its faults with respx (500s, timeouts,
refusals, one Alertmanager of two down). Its contract with a real Alertmanager is tested in
tests/integration/test_sinks_alertmanager.py."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import httpx
import respx

from diagnosd.findings.lifecycle import Finding, State
from diagnosd.sinks.alertmanager import ALERTNAME, AlertmanagerConfig, AlertmanagerSink, Update, labels, postable
from tests.sinks.builders import AT, Tally, finding, words

A, B = "http://am-a:9093", "http://am-b:9093"
NOW = AT + timedelta(hours=1)


def config(*urls: str, **options: Any) -> AlertmanagerConfig:
    return AlertmanagerConfig(urls=urls or (A,), backoff=0.01, external_url="https://diagnosd.example", **options)


def ticking(start: datetime = NOW) -> Callable[[], datetime]:
    """A wall clock one second further at each reading."""
    moments: Iterator[datetime] = (start + timedelta(seconds=i) for i in range(10**6))
    return lambda: next(moments)


def posted(route: respx.Route, call: int = -1) -> list[dict[str, Any]]:
    body: list[dict[str, Any]] = json.loads(route.calls[call].request.content)
    return body


def test_a_firing_finding_is_a_postable_alert_valid_for_four_resend_intervals() -> None:
    f = finding("vllm-0")
    alert = postable(Update(f), NOW, config(resend_interval=timedelta(minutes=1)), words)
    assert alert["labels"] == {
        "alertname": ALERTNAME,
        "symptom": "queue_backlog",
        "cause": "kv_pool_full",
        "severity": "warning",
        "namespace": "prod",
        "pod": "vllm-0",
    }
    assert alert["startsAt"] == f.phase.fired_at.isoformat()  # type: ignore[union-attr]
    assert alert["endsAt"] == (NOW + timedelta(minutes=4)).isoformat()
    assert alert["generatorURL"] == f"https://diagnosd.example/findings/{f.fingerprint}"
    notes = alert["annotations"]
    assert notes["summary"] == "root cause: kv_pool_full title (symptom queue_backlog on namespace=prod, pod=vllm-0)"
    assert notes["evidence"] == "kv_pool_full: 0.95 (threshold > 0.9)"
    assert notes["remediation"] == "fix it"


def test_a_resolved_finding_ends_at_its_resolution_and_without_external_url_has_no_link() -> None:
    resolved = NOW - timedelta(seconds=5)
    alert = postable(Update(finding("vllm-0"), resolved), NOW, AlertmanagerConfig(urls=(A,)), words)
    assert alert["endsAt"] == resolved.isoformat()
    assert "generatorURL" not in alert


def test_a_target_label_that_clashes_with_the_alerts_own_is_renamed() -> None:
    assert labels(finding("vllm-0", severity="page", alertname="x")) == {
        "alertname": ALERTNAME,
        "symptom": "queue_backlog",
        "cause": "kv_pool_full",
        "severity": "warning",
        "namespace": "prod",
        "pod": "vllm-0",
        "target_severity": "page",
        "target_alertname": "x",
    }


async def test_firing_then_resolved_reaches_alertmanager() -> None:
    findings = [finding("vllm-0")]
    tally = Tally()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(f"{A}/api/v2/alerts").respond(200)
        sink = AlertmanagerSink(config(), lambda: findings, words, tally, clock=lambda: NOW)
        await sink.start()
        await tally.reached("alertmanager", "sent")
        [firing] = posted(route)
        assert firing["endsAt"] == (NOW + timedelta(minutes=4)).isoformat()
        findings.clear()
        sink.wake()
        await tally.reached("alertmanager", "sent", 2)
        await sink.stop()
    [resolved] = posted(route)
    assert resolved["labels"] == firing["labels"]
    assert resolved["endsAt"] == NOW.isoformat()


async def test_500s_and_timeouts_are_retried_until_alertmanager_takes_the_alert() -> None:
    findings = [finding("vllm-0")]
    tally = Tally()
    with respx.mock(assert_all_called=True) as mock:
        faults: list[httpx.Response | Exception] = [
            httpx.Response(500, text="busy"),
            httpx.ConnectTimeout("slow"),
            httpx.ConnectError("refused"),
        ]
        route = mock.post(f"{A}/api/v2/alerts").mock(side_effect=[*faults, httpx.Response(200)])
        sink = AlertmanagerSink(config(), lambda: findings, words, tally, clock=ticking())
        await sink.start()
        await tally.reached("alertmanager", "sent")
        await sink.stop()
    assert tally["alertmanager", "failed"] == 3
    assert route.call_count == 4
    # Each attempt refreshes endsAt: the alert that finally arrives is valid from its own post on.
    ends = [posted(route, i)[0]["endsAt"] for i in range(4)]
    assert ends == sorted(ends)
    assert len(set(ends)) == 4


async def test_an_alert_alertmanager_refuses_is_dropped_not_retried() -> None:
    findings = [finding("vllm-0")]
    tally = Tally()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(f"{A}/api/v2/alerts").mock(
            side_effect=[httpx.Response(400, text="bad label"), httpx.Response(200)]
        )
        sink = AlertmanagerSink(config(), lambda: findings, words, tally, clock=lambda: NOW)
        await sink.start()
        await tally.reached("alertmanager", "rejected")
        findings.append(finding("vllm-1"))
        sink.wake()
        await tally.reached("alertmanager", "sent")
        await sink.stop()
    assert [a["labels"]["pod"] for a in posted(route)] == ["vllm-1"]


async def test_each_alertmanager_has_its_own_queue_one_down_delays_no_other() -> None:
    findings = [finding("vllm-0")]
    tally = Tally()
    with respx.mock(assert_all_called=True) as mock:
        down = mock.post(f"{A}/api/v2/alerts").respond(503)
        up = mock.post(f"{B}/api/v2/alerts").respond(200)
        sink = AlertmanagerSink(config(A, B), lambda: findings, words, tally, clock=lambda: NOW)
        await sink.start()
        await tally.reached("alertmanager", "sent")
        await tally.reached("alertmanager", "failed", 2)
        await sink.stop()
    assert up.call_count == 1
    assert down.call_count >= 2
    assert posted(up)[0]["labels"]["pod"] == "vllm-0"


async def test_active_alerts_are_re_sent_every_resend_interval_with_a_later_end() -> None:
    findings = [finding("vllm-0")]
    tally = Tally()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(f"{A}/api/v2/alerts").respond(200)
        every = timedelta(milliseconds=50)
        sink = AlertmanagerSink(config(resend_interval=every), lambda: findings, words, tally, clock=ticking())
        await sink.start()
        await tally.reached("alertmanager", "sent", 3)
        await sink.stop()
    first, second = posted(route, 0)[0], posted(route, 1)[0]
    assert first["labels"] == second["labels"]
    assert first["startsAt"] == second["startsAt"]
    assert second["endsAt"] > first["endsAt"]


async def test_a_bearer_token_is_sent_and_a_pending_finding_never_is() -> None:
    findings: list[Finding] = [finding("vllm-0", State.PENDING), finding("vllm-1")]
    tally = Tally()
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(f"{A}/api/v2/alerts").respond(200)
        sink = AlertmanagerSink(config(bearer_token="s3cret"), lambda: findings, words, tally, clock=lambda: NOW)
        await sink.start()
        await tally.reached("alertmanager", "sent")
        await sink.stop()
    assert route.calls[0].request.headers["authorization"] == "Bearer s3cret"
    assert [a["labels"]["pod"] for a in posted(route)] == ["vllm-1"]


async def test_a_finding_that_cannot_be_worded_is_dropped_and_the_sink_goes_on() -> None:
    findings = [finding("vllm-0")]
    tally = Tally()

    def fragile(f: Finding) -> Any:
        if f.labels["pod"] == "vllm-0":
            raise ValueError("a bug in the wording")
        return words(f)

    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(f"{A}/api/v2/alerts").respond(200)
        sink = AlertmanagerSink(config(), lambda: findings, fragile, tally, clock=lambda: NOW)
        await sink.start()
        await tally.reached("alertmanager", "rejected")
        findings.append(finding("vllm-1"))
        sink.wake()
        await tally.reached("alertmanager", "sent")
        await sink.stop()
    assert [a["labels"]["pod"] for a in posted(route)] == ["vllm-1"]
