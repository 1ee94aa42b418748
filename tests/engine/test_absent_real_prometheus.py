"""`absent_as_zero` on a real Prometheus: a count reads 0 for a target only where its own series exist.

A restart count joined to the engines that served (`restarts and on (pod) engine`): with
kube-state-metrics scraped, a pod without a restart series restarted 0 times; without it, the
engine series alone must not turn "no restart series" into "no restart".
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from diagnosd.engine import Evaluator, Scope
from diagnosd.findings import Reason, Verdict
from diagnosd.findings.model import CheckResult
from diagnosd.promlocal.openmetrics import Series
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.trees.model import Tree
from tests.conftest import StartPrometheus

TEXT = {"zh": "中", "en": "en"}
START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
AT = datetime.fromtimestamp(START + 600, UTC)
RESTARTS = (
    "sum by ($target) (increase(kube_pod_container_status_restarts_total[10m]))"
    " and on ($target) (sum by ($target) (count_over_time(vllm:num_requests_running[10m]))"
    " or sum by ($target) (count_over_time(sglang:num_running_reqs[10m])))"
)
TREE = Tree.model_validate(
    {
        "id": "streaming_interrupted",
        "title": TEXT,
        "target": ["namespace", "pod"],
        "detect": {"title": TEXT, "query": "max by ($target) (vllm:num_requests_running)", "compare": {"above": -1}},
        "nodes": [
            {
                "id": "engine_restart",
                "title": TEXT,
                "query": RESTARTS,
                "compare": {"above": 0},
                "absent_as_zero": True,
                "conclusion": {"cause": "engine_restart", "title": TEXT, "remediation": [TEXT]},
            }
        ],
    }
)


def gauge(name: str, pod: str, value: float, **labels: str) -> Series:
    return Series(name, {"namespace": "prod", "pod": pod, **labels}, [(START + 15 * i, value) for i in range(41)])


def checks(url: str, scope: Scope | None = None, strict: tuple[str, ...] = ()) -> dict[str, CheckResult]:
    async def run() -> dict[str, CheckResult]:
        config = PrometheusConfig(url=url, timeout=10.0)
        async with config.client() as client:
            evaluator = Evaluator(PrometheusSource(config, client), strict_labels=strict)
            diagnosis = await evaluator.diagnose(TREE, scope or Scope(), AT)
        return {t.labels["pod"]: t.checks[0] for t in diagnosis.targets}

    return asyncio.run(run())


def test_no_restart_series_on_a_scraped_pod_is_zero_restarts(start_prometheus: StartPrometheus) -> None:
    prom = start_prometheus(
        [
            gauge("vllm:num_requests_running", "vllm-0", 10),
            gauge("vllm:num_requests_running", "vllm-1", 10),
            gauge("kube_pod_container_status_restarts_total", "vllm-1", 0),
        ]
    )
    found = checks(prom.url)
    assert found["vllm-0"].verdict is Verdict.CLEAR  # no series for it: no restart counted
    assert found["vllm-1"].verdict is Verdict.CLEAR


def test_without_kube_state_metrics_a_restart_count_is_unknown_not_zero(start_prometheus: StartPrometheus) -> None:
    prom = start_prometheus([gauge("vllm:num_requests_running", "vllm-0", 10)])
    (only,) = checks(prom.url).values()
    assert only.verdict is Verdict.UNKNOWN
    assert only.reason is Reason.METRIC_ABSENT
    assert "kube_pod_container_status_restarts_total" in (only.detail or "")


def test_an_exporter_missing_from_one_cluster_of_a_shared_store_is_missing_there(
    start_prometheus: StartPrometheus,
) -> None:
    # One store for two clusters (the strict `cluster` label on every series): kube-state-metrics
    # runs in "eu" only. In "us" a restart count cannot be read, whatever "eu" has.
    prom = start_prometheus(
        [
            gauge("vllm:num_requests_running", "vllm-0", 10, cluster="eu"),
            gauge("kube_pod_container_status_restarts_total", "vllm-0", 0, cluster="eu"),
            gauge("vllm:num_requests_running", "vllm-0", 10, cluster="us"),
        ]
    )
    (us,) = checks(prom.url, Scope.of({"cluster": "us"}), strict=("cluster",)).values()
    assert (us.verdict, us.reason) == (Verdict.UNKNOWN, Reason.METRIC_ABSENT)
    (eu,) = checks(prom.url, Scope.of({"cluster": "eu"}), strict=("cluster",)).values()
    assert eu.verdict is Verdict.CLEAR


def test_a_hostile_strict_label_value_scopes_name_discovery_to_exactly_that_value(
    start_prometheus: StartPrometheus,
) -> None:
    # Quotes, a backslash, a newline, a brace and non-ASCII in the strict value: the discovery
    # selector must quote it as the queries do, or names read missing (or the request fails).
    hostile = 'eu "west"\\1}\nü'
    prom = start_prometheus(
        [
            gauge("vllm:num_requests_running", "vllm-0", 10, cluster=hostile),
            gauge("kube_pod_container_status_restarts_total", "vllm-0", 0, cluster=hostile),
            gauge("vllm:num_requests_running", "vllm-0", 10, cluster='eu "west"'),
        ]
    )
    (found,) = checks(prom.url, Scope.of({"cluster": hostile}), strict=("cluster",)).values()
    assert found.verdict is Verdict.CLEAR
    # A prefix of the hostile value is another cluster, without kube-state-metrics.
    (other,) = checks(prom.url, Scope.of({"cluster": 'eu "west"'}), strict=("cluster",)).values()
    assert (other.verdict, other.reason) == (Verdict.UNKNOWN, Reason.METRIC_ABSENT)


def test_a_lenient_scope_label_does_not_narrow_name_discovery(start_prometheus: StartPrometheus) -> None:
    # Only strict labels (on every series) scope the names. `namespace` is lenient: series of
    # the same metric outside it (node or exporter series carry other namespaces) still count, so
    # the discovery is the store's, as before strict scoping existed.
    prom = start_prometheus(
        [
            gauge("vllm:num_requests_running", "vllm-0", 10, cluster="eu"),
            Series(
                "kube_pod_container_status_restarts_total",
                {"namespace": "kube-system", "pod": "coredns-0", "cluster": "eu"},
                [(START + 15 * i, 0) for i in range(41)],
            ),
        ]
    )
    scope = Scope.of({"cluster": "eu", "namespace": "prod"})
    (eu,) = checks(prom.url, scope, strict=("cluster",)).values()
    # kube-state-metrics runs in "eu" (it exports kube-system's pods): vllm-0 has no restart series,
    # so it restarted 0 times.
    assert eu.verdict is Verdict.CLEAR
