"""The findings collector (rebuilt at every scrape, capped) and the self-metrics, on a fresh registry."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from diagnosd.errors import (
    DeadlineExceeded,
    QueryRejected,
    SourceError,
    SourceProtocolError,
    SourceTimeout,
    SourceUnavailable,
)
from diagnosd.findings.lifecycle import Finding, Phase, State, Trigger
from diagnosd.findings.target import TargetState
from diagnosd.sinks.metrics import ErrorKind, FindingsCollector, Metrics, error_kind
from tests.findings.builders import AT, cause


def finding(pod: str, state: State = State.FIRING, **labels: str) -> Finding:
    return Finding(
        fingerprint=pod,
        symptom="queue_backlog",
        cause="kv_pool_full",
        labels={"namespace": "prod", "pod": pod, **labels},
        phase=Phase(state, AT, AT),
        last_seen=AT,
        trigger=Trigger.ROUND,
        root_cause=cause("kv_pool_full"),
        evaluated_at=AT,
    )


def state(pod: str, present: bool | None = True, **values: float) -> TargetState:
    return TargetState("queue_backlog", {"namespace": "prod", "pod": pod}, present, values, AT, Trigger.ROUND)


def scrape(registry: CollectorRegistry) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def setup(
    findings: list[Finding], states: list[TargetState], cap: int = 100
) -> tuple[CollectorRegistry, Metrics, dict[str, Any]]:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    current: dict[str, Any] = {"findings": findings, "states": states}
    metrics.attach(FindingsCollector(lambda: current["findings"], lambda: current["states"], cap, metrics.dropped))
    return registry, metrics, current


def test_firing_findings_present_symptoms_and_check_values_are_exported() -> None:
    registry, _, _ = setup(
        [finding("vllm-0"), finding("vllm-9", State.PENDING)],
        [state("vllm-0", detect=20.0, kv_pool_full=0.95), state("vllm-1", present=False, detect=2.0)],
    )
    got = scrape(registry)
    assert got["diagnosd_root_cause"] == [
        (
            {
                "symptom": "queue_backlog",
                "cause": "kv_pool_full",
                "severity": "warning",
                "namespace": "prod",
                "pod": "vllm-0",
            },
            1.0,
        )
    ]
    assert got["diagnosd_symptom_active"] == [({"symptom": "queue_backlog", "namespace": "prod", "pod": "vllm-0"}, 1.0)]
    assert sorted((s[0]["pod"], s[0]["check"], s[1]) for s in got["diagnosd_check_value"]) == [
        ("vllm-0", "detect", 20.0),
        ("vllm-0", "kv_pool_full", 0.95),
        ("vllm-1", "detect", 2.0),
    ]


def test_families_are_rebuilt_at_each_scrape() -> None:
    registry, _, current = setup([finding("vllm-0")], [])
    assert len(scrape(registry)["diagnosd_root_cause"]) == 1
    current["findings"] = []
    assert "diagnosd_root_cause" not in scrape(registry)


def test_a_target_label_named_like_a_fixed_label_is_prefixed() -> None:
    registry, _, _ = setup([finding("vllm-0", cause="x", severity="y")], [])
    [(labels, _)] = scrape(registry)["diagnosd_root_cause"]
    assert (labels["cause"], labels["target_cause"], labels["severity"], labels["target_severity"]) == (
        "kv_pool_full",
        "x",
        "warning",
        "y",
    )


def test_the_series_cap_drops_and_counts() -> None:
    registry, _, _ = setup(
        [finding(f"vllm-{i}") for i in range(3)],
        [state(f"vllm-{i}", detect=1.0, kv_pool_full=0.5) for i in range(3)],
        cap=4,
    )
    first = scrape(registry)
    assert len(first["diagnosd_root_cause"]) == 3  # root causes first: they matter most
    assert len(first["diagnosd_symptom_active"]) == 1
    assert "diagnosd_check_value" not in first
    assert first["diagnosd_exported_series_dropped_total"] == [({}, 8.0)]
    second = scrape(registry)
    assert second["diagnosd_exported_series_dropped_total"] == [({}, 16.0)]


def test_self_metrics_have_their_names_and_close_unregisters() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.diagnoses.labels("round", "ok").inc()
    metrics.round_succeeded(AT + timedelta(seconds=1))
    metrics.trees.set(2)
    got = scrape(registry)
    assert got["diagnosd_diagnoses_total"] == [({"trigger": "round", "outcome": "ok"}, 1.0)]
    assert got["diagnosd_last_successful_round_timestamp_seconds"] == [({}, AT.timestamp() + 1)]
    assert got["diagnosd_trees_loaded"] == [({}, 2.0)]
    metrics.close()
    assert generate_latest(registry) == b""
    Metrics(registry)  # the registry takes a new set: a restarted app in the same process


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (SourceUnavailable("connection refused", url="u"), "unavailable"),
        (SourceTimeout("no answer within 10s", url="u"), "timeout"),
        (DeadlineExceeded("no answer within the diagnosis deadline of 2s", url="u"), "deadline"),
        (QueryRejected("bad_data: parse error", url="u"), "rejected"),
        (SourceProtocolError("not JSON", url="u"), "protocol"),
    ],
)
def test_each_source_error_kind_has_its_one_reason(error: SourceError, reason: str) -> None:
    assert error_kind(error) == reason
    assert {str(kind) for kind in ErrorKind} == {"unavailable", "timeout", "deadline", "rejected", "protocol"}


def test_per_tree_series_exist_from_the_start_and_count_each_kind_once_per_diagnosis() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.trees_loaded(["queue_backlog", "kv_hit_low"])
    before = scrape(registry)
    metrics.tree_succeeded("queue_backlog", AT)
    metrics.tree_failed("kv_hit_low", [SourceTimeout("t", url="u"), SourceTimeout("t", url="u")])
    after = scrape(registry)
    assert sorted(before["diagnosd_tree_last_success_timestamp_seconds"], key=str) == [
        ({"symptom": "kv_hit_low"}, 0.0),
        ({"symptom": "queue_backlog"}, 0.0),
    ]
    assert len(before["diagnosd_tree_errors_total"]) == 2 * len(ErrorKind)
    assert {value for _, value in before["diagnosd_tree_errors_total"]} == {0.0}
    assert dict((s["symptom"], v) for s, v in after["diagnosd_tree_last_success_timestamp_seconds"]) == {
        "queue_backlog": AT.timestamp(),
        "kv_hit_low": 0.0,
    }
    counted = {(s["symptom"], s["reason"]): v for s, v in after["diagnosd_tree_errors_total"] if v}
    assert counted == {("kv_hit_low", "timeout"): 1.0}
