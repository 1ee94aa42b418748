"""Alertmanager payloads (captured from 0.25) into diagnosis jobs: quirks, mapping, and the scope."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from diagnosd.daemon import compose
from diagnosd.daemon.alertmanager.payload import Payload, Skip, check_version, plan, scope
from diagnosd.errors import RequestError
from tests.serving import RULES, sample

TREES = compose.load(RULES).ruleset.trees
NOW = datetime(2026, 11, 29, 14, 30, tzinfo=UTC)


def test_a_firing_alert_has_no_end_and_keeps_nanoseconds_stable() -> None:
    payload = Payload.model_validate(sample("webhook-received.json"))
    [alert] = payload.alerts
    assert alert.endsAt == datetime(1, 1, 1, tzinfo=UTC)
    assert alert.ends_at is None
    assert alert.startsAt == datetime(2026, 11, 29, 14, 24, 44, 449796, tzinfo=UTC)
    again = Payload.model_validate(sample("webhook-received.json"))
    assert (
        plan(payload, TREES, {"VLLMQueueBacklog": "queue_backlog"}, [], NOW).jobs[0].key
        == plan(again, TREES, {"VLLMQueueBacklog": "queue_backlog"}, [], NOW).jobs[0].key
    )


def test_a_resolved_alert_has_its_end() -> None:
    [alert] = Payload.model_validate(sample("webhook-received-resolved.json")).alerts
    assert alert.ends_at == datetime(2026, 11, 29, 14, 24, 43, tzinfo=UTC)


def test_each_alert_keeps_its_own_status_in_a_firing_group() -> None:
    payload = Payload.model_validate(sample("webhook-example-mixed.json"))
    jobs = plan(payload, TREES, {"VLLMHighTTFT": "queue_backlog"}, ["model_name"], NOW).jobs
    assert payload.status == "firing"
    assert [(j.fingerprint, j.status, j.resolved) for j in jobs] == [
        ("3bae748269327c83", "resolved", True),
        ("9ea2568f752acc65", "firing", False),
    ]


def test_the_symptom_label_wins_over_the_map_and_unknowns_are_skipped() -> None:
    body = sample("webhook-received.json")
    body["alerts"][0]["labels"]["symptom"] = "kv_hit_low"
    [job] = plan(Payload.model_validate(body), TREES, {"VLLMQueueBacklog": "queue_backlog"}, [], NOW).jobs
    assert job.symptom == "kv_hit_low"
    body["alerts"][0]["labels"]["symptom"] = "ttft_high"
    skipped = plan(Payload.model_validate(body), TREES, {}, [], NOW).skipped
    assert [(s.reason, s.detail) for s in skipped] == [(Skip.UNKNOWN_SYMPTOM, "no tree for 'ttft_high'")]
    del body["alerts"][0]["labels"]["symptom"]
    assert plan(Payload.model_validate(body), TREES, {}, [], NOW).skipped[0].reason is Skip.UNMAPPED


def test_the_same_state_twice_in_one_delivery_is_one_job() -> None:
    body = sample("webhook-received.json")
    body["alerts"] = body["alerts"] * 2
    assert len(plan(Payload.model_validate(body), TREES, {"VLLMQueueBacklog": "queue_backlog"}, [], NOW).jobs) == 1


def test_a_missing_fingerprint_is_derived_from_the_labels() -> None:
    body = sample("webhook-received.json")
    del body["alerts"][0]["fingerprint"]
    first = Payload.model_validate(body).alerts[0].identity
    body["alerts"][0]["labels"] = dict(reversed(list(body["alerts"][0]["labels"].items())))
    assert Payload.model_validate(body).alerts[0].identity == first
    assert len(first) == 16


LABELS = {
    "alertname": "VLLMQueueBacklog",
    "severity": "critical",
    "job": "vllm",
    "instance": "10.0.1.12:8000",
    "namespace": "prod",
    "pod": "vllm-0",
    "model_name": "llama",
    "prometheus": "monitoring/k8s",
    "symptom": "queue_backlog",
    "team": "",
}


@pytest.mark.parametrize(
    ("scope_labels", "expected"),
    [
        (["model_name"], {"namespace": "prod", "pod": "vllm-0", "model_name": "llama"}),
        ([], {"namespace": "prod", "pod": "vllm-0"}),
        (["model_name", "team", "cluster"], {"namespace": "prod", "pod": "vllm-0", "model_name": "llama"}),
    ],
)
def test_scope_is_target_labels_plus_scope_labels(scope_labels: list[str], expected: dict[str, str]) -> None:
    assert scope(LABELS, TREES["queue_backlog"], scope_labels) == expected


def test_an_alert_without_target_labels_scopes_what_it_has() -> None:
    assert scope({"alertname": "X", "namespace": "prod"}, TREES["queue_backlog"], ["model_name"]) == {
        "namespace": "prod"
    }


@pytest.mark.parametrize(
    "change",
    [
        {"status": "unknown"},
        {"alerts": None},
        {"alerts": [{"status": "firing", "labels": {}, "startsAt": "not a time"}]},
        {"alerts": [{"status": "firing", "labels": {"a": ["b"]}, "startsAt": "2026-01-01T00:00:00Z"}]},
        {"truncatedAlerts": -1},
        # Times are RFC3339 strings, as Alertmanager writes them; pydantic alone takes these.
        {"alerts": [{"status": "firing", "labels": {}, "startsAt": "2026-01-01T00:00:00Z", "endsAt": 0}]},
        {"alerts": [{"status": "firing", "labels": {}, "startsAt": 1767225600}]},
        {"alerts": [{"status": "firing", "labels": {}, "startsAt": "1767225600"}]},
        {"alerts": [{"status": "firing", "labels": {}, "startsAt": "2026-01-01"}]},
        {"alerts": [{"status": "firing", "labels": {}, "startsAt": "2026-01-01T00:00:00"}]},
    ],
)
def test_malformed_payloads_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Payload.model_validate(sample("webhook-received.json") | change)


def test_rfc3339_times_with_an_offset_or_nanoseconds_are_read_in_utc() -> None:
    body = sample("webhook-received.json")
    body["alerts"][0]["startsAt"] = "2026-11-29T16:24:44.449796123+02:00"
    [alert] = Payload.model_validate(body).alerts
    assert alert.startsAt == datetime(2026, 11, 29, 14, 24, 44, 449796, tzinfo=UTC)


@pytest.mark.parametrize("version", ["3", "5", ""])
def test_another_payload_version_is_refused_by_name(version: str) -> None:
    payload = Payload.model_validate(sample("webhook-received.json") | {"version": version})
    with pytest.raises(RequestError, match=f"payload version {version!r} is not supported") as caught:
        check_version(payload)
    assert caught.value.parameter == "version"
    check_version(Payload.model_validate(sample("webhook-received.json")))


@pytest.mark.parametrize(
    ("pod", "why"),
    [("a\ud800b", "not valid unicode"), ("v" * 1025, "longer than 1024")],
)
def test_an_alert_whose_scope_no_query_may_carry_is_skipped_with_why(pod: str, why: str) -> None:
    body = sample("webhook-received.json")
    body["alerts"].append({**body["alerts"][0], "fingerprint": "0000000000000bad"})
    body["alerts"][1]["labels"] = {**body["alerts"][0]["labels"], "pod": pod}
    planned = plan(Payload.model_validate(body), TREES, {"VLLMQueueBacklog": "queue_backlog"}, [], NOW)
    assert [job.scope["pod"] for job in planned.jobs] == ["vllm-0"]
    [skipped] = planned.skipped
    assert (skipped.fingerprint, skipped.reason) == ("0000000000000bad", Skip.BAD_SCOPE)
    assert "'pod'" in skipped.detail
    assert why in skipped.detail


def test_a_replacement_character_is_a_valid_scope_value() -> None:
    body = sample("webhook-received.json")
    body["alerts"][0]["labels"]["pod"] = "vllm-\ufffd"
    [job] = plan(Payload.model_validate(body), TREES, {"VLLMQueueBacklog": "queue_backlog"}, [], NOW).jobs
    assert job.scope["pod"] == "vllm-\ufffd"
