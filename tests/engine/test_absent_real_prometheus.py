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


def gauge(name: str, pod: str, value: float) -> Series:
    return Series(name, {"namespace": "prod", "pod": pod}, [(START + 15 * i, value) for i in range(41)])


def checks(url: str) -> dict[str, CheckResult]:
    async def run() -> dict[str, CheckResult]:
        config = PrometheusConfig(url=url, timeout=10.0)
        async with config.client() as client:
            diagnosis = await Evaluator(PrometheusSource(config, client)).diagnose(TREE, Scope(), AT)
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
