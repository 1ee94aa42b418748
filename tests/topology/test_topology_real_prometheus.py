"""Topology on a real Prometheus: Prometheus Operator target labels on exporter series, node keys
by name or ip:port, dcgm-exporter with honorLabels on and off, owner and HPA joins, and shares
against the unscoped population, all under a pod-scoped (or model-scoped) diagnosis."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from diagnosd.engine import Evaluator, Scope
from diagnosd.findings import Verdict
from diagnosd.findings.model import CheckResult, Diagnosis
from diagnosd.promlocal.openmetrics import Series
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.topology import Topology
from diagnosd.trees.model import Tree
from tests.conftest import StartPrometheus

TEXT = {"zh": "中", "en": "en"}
START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
AT = datetime.fromtimestamp(START + 600, UTC)
POD_SCOPE = {"namespace": "prod", "pod": "vllm-0"}
# What a Prometheus Operator ServiceMonitor adds to every series of an exporter's targets.
NODE_EXPORTER = {
    "namespace": "monitoring",
    "pod": "node-exporter-x7k2p",
    "service": "node-exporter",
    "endpoint": "http-metrics",
    "job": "node-exporter",
}
KSM = {
    "namespace": "monitoring",
    "pod": "kube-state-metrics-6d5f7b9c8-h2j4k",
    "service": "kube-state-metrics",
    "endpoint": "http",
    "job": "kube-state-metrics",
    "instance": "10.2.0.3:8080",
}


def tree(id_: str, target: list[str], detect: str, checks: dict[str, tuple[str, dict[str, object]]]) -> Tree:
    nodes = [
        {
            "id": key,
            "title": TEXT,
            "query": query,
            "compare": compare,
            "conclusion": {"cause": key, "title": TEXT, "remediation": [TEXT]},
        }
        for key, (query, compare) in checks.items()
    ]
    return Tree.model_validate(
        {
            "id": id_,
            "title": TEXT,
            "target": target,
            "detect": {"title": TEXT, "query": detect, "compare": {"above": -1}},
            "nodes": nodes,
        }
    )


def gauge(name: str, labels: dict[str, str], value: float) -> Series:
    return Series(name, labels, [(START + 15 * i, value) for i in range(41)])


def counter(name: str, labels: dict[str, str], per_second: float) -> Series:
    return Series(name, labels, [(START + 15 * i, per_second * 15 * i) for i in range(41)])


def diagnose(url: str, tree_: Tree, scope: dict[str, str] | None) -> Diagnosis:
    async def run() -> Diagnosis:
        config = PrometheusConfig(url=url, timeout=10.0)
        async with config.client() as client:
            evaluator = Evaluator(PrometheusSource(config, client))
            return await evaluator.diagnose(tree_, Scope.of(scope or {}), AT)

    return asyncio.run(run())


def checks_of(diagnosis: Diagnosis, **labels: str) -> dict[str, CheckResult]:
    (target,) = [t for t in diagnosis.targets if dict(t.labels) == labels]
    return {c.id: c for c in target.checks}


def value(check: CheckResult) -> float | None:
    assert check.evidence is not None, f"{check.id}: {check.verdict} {check.reason} {check.detail}"
    return check.evidence.value


ENGINE = "sum by ($target) (rate(vllm:generation_tokens_total[5m]))"
IB_DOWN = (
    "max by ($target) (@pod_node * on (node) group_left () sum by (node) (@node(node_infiniband_state_id) != bool 4))"
)


def engine_pods() -> list[Series]:
    return [
        counter("vllm:generation_tokens_total", {"namespace": "prod", "pod": "vllm-0", "model_name": "m"}, 100),
        counter("vllm:generation_tokens_total", {"namespace": "prod", "pod": "vllm-1", "model_name": "m"}, 100),
    ]


def pod_info(pod: str, node: str, host_ip: str) -> Series:
    labels = {**KSM, "namespace": "prod", "pod": pod, "node": node, "host_ip": host_ip, "uid": f"u-{pod}"}
    return gauge("kube_pod_info", labels, 1)


@pytest.mark.parametrize(
    ("instance", "mapping"),
    [
        ("gpu-1:9100", "none"),  # kube-prometheus-stack: instance relabelled to the node name
        ("10.0.0.5:9100", "kube_pod_info"),  # plain kubernetes_sd: instance is ip:port
        ("10.0.0.5:9100", "kube_node_info"),
    ],
)
def test_node_exporter_with_operator_labels_joins_a_pod_scoped_diagnosis(
    start_prometheus: StartPrometheus, instance: str, mapping: str
) -> None:
    other = "gpu-2:9100" if instance.startswith("gpu") else "10.0.0.6:9100"
    series = [
        *engine_pods(),
        gauge("node_infiniband_state_id", {**NODE_EXPORTER, "instance": instance, "device": "mlx5_0", "port": "1"}, 1),
        gauge("node_infiniband_state_id", {**NODE_EXPORTER, "instance": other, "device": "mlx5_0", "port": "1"}, 4),
    ]
    if mapping == "kube_node_info":
        series += [
            gauge("kube_pod_info", {**KSM, "namespace": "prod", "pod": "vllm-0", "node": "gpu-1", "uid": "u0"}, 1),
            gauge("kube_pod_info", {**KSM, "namespace": "prod", "pod": "vllm-1", "node": "gpu-2", "uid": "u1"}, 1),
            gauge("kube_node_info", {**KSM, "node": "gpu-1", "internal_ip": "10.0.0.5"}, 1),
            gauge("kube_node_info", {**KSM, "node": "gpu-2", "internal_ip": "10.0.0.6"}, 1),
        ]
    else:
        series += [pod_info("vllm-0", "gpu-1", "10.0.0.5"), pod_info("vllm-1", "gpu-2", "10.0.0.6")]
    prom = start_prometheus(series)
    t = tree("nccl_failure", ["namespace", "pod"], ENGINE, {"ib_link": (IB_DOWN, {"above": 0})})

    scoped = checks_of(diagnose(prom.url, t, POD_SCOPE), namespace="prod", pod="vllm-0")
    assert scoped["ib_link"].verdict is Verdict.MATCHED
    assert value(scoped["ib_link"]) == 1

    fleet = diagnose(prom.url, t, {"namespace": "prod"})
    assert checks_of(fleet, namespace="prod", pod="vllm-0")["ib_link"].verdict is Verdict.MATCHED
    healthy = checks_of(fleet, namespace="prod", pod="vllm-1")["ib_link"]
    assert (healthy.verdict, value(healthy)) == (Verdict.CLEAR, 0)


def dcgm(gpu: str, util: float, pod_labels: dict[str, str]) -> Series:
    labels = {"gpu": gpu, "UUID": f"GPU-{gpu}", "modelName": "NVIDIA H100", "Hostname": "gpu-1", **pod_labels}
    return gauge("DCGM_FI_DEV_GPU_UTIL", labels, util)


DCGM_OPERATOR = {"namespace": "gpu-operator", "pod": "dcgm-exporter-abcde", "service": "dcgm-exporter"}


@pytest.mark.parametrize("honor_labels", [True, False])
def test_dcgm_exporter_pod_labels_with_honor_labels_on_and_off(
    start_prometheus: StartPrometheus, honor_labels: bool
) -> None:
    def pod(name: str) -> dict[str, str]:
        if honor_labels:
            return {**DCGM_OPERATOR, "namespace": "prod", "pod": name, "container": "vllm"}
        return {**DCGM_OPERATOR, "exported_namespace": "prod", "exported_pod": name, "exported_container": "vllm"}

    series = [*engine_pods(), dcgm("0", 10, pod("vllm-0")), dcgm("1", 90, pod("vllm-1")), dcgm("2", 0, DCGM_OPERATOR)]
    prom = start_prometheus(series)
    util = "max by ($target) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[5m]))"
    t = tree("gpu_underutilized", ["namespace", "pod"], ENGINE, {"gpu_idle": (util, {"below": 20})})

    scoped = checks_of(diagnose(prom.url, t, POD_SCOPE), namespace="prod", pod="vllm-0")["gpu_idle"]
    assert (scoped.verdict, value(scoped)) == (Verdict.MATCHED, 10)
    fleet = diagnose(prom.url, t, None)
    busy = checks_of(fleet, namespace="prod", pod="vllm-1")["gpu_idle"]
    assert (busy.verdict, value(busy)) == (Verdict.CLEAR, 90)


def test_pod_to_hpa_through_owners_with_operator_labels(start_prometheus: StartPrometheus) -> None:
    rs = "vllm-7d9f8c6b5"
    series = [
        counter("vllm:generation_tokens_total", {"namespace": "prod", "pod": "vllm-0", "model_name": "m"}, 100),
        gauge(
            "kube_pod_owner",
            {**KSM, "namespace": "prod", "pod": "vllm-0", "owner_kind": "ReplicaSet", "owner_name": rs},
            1,
        ),
        gauge(
            "kube_replicaset_owner",
            {**KSM, "namespace": "prod", "replicaset": rs, "owner_kind": "Deployment", "owner_name": "vllm"},
            1,
        ),
        gauge(
            "kube_horizontalpodautoscaler_info",
            {
                **KSM,
                "namespace": "prod",
                "horizontalpodautoscaler": "keda-hpa-vllm",
                "scaletargetref_kind": "Deployment",
                "scaletargetref_name": "vllm",
            },
            1,
        ),
        gauge(
            "kube_horizontalpodautoscaler_spec_max_replicas",
            {**KSM, "namespace": "prod", "horizontalpodautoscaler": "keda-hpa-vllm"},
            4,
        ),
    ]
    prom = start_prometheus(series)
    hpa = (
        "max by ($target) (@pod_hpa * on (namespace, horizontalpodautoscaler) group_left () "
        "max by (namespace, horizontalpodautoscaler) (kube_horizontalpodautoscaler_spec_max_replicas))"
    )
    deployment = "count by ($target) (@pod_deployment)"
    t = tree(
        "queue_backlog",
        ["namespace", "pod"],
        ENGINE,
        {"max_replicas": (hpa, {"above": 3}), "owned": (deployment, {"above": 0})},
    )
    checks = checks_of(diagnose(prom.url, t, POD_SCOPE), namespace="prod", pod="vllm-0")
    assert (checks["max_replicas"].verdict, value(checks["max_replicas"])) == (Verdict.MATCHED, 4)
    assert (checks["owned"].verdict, value(checks["owned"])) == (Verdict.MATCHED, 1)


def test_a_share_under_a_model_scope_is_against_every_model(start_prometheus: StartPrometheus) -> None:
    series = [
        counter("litellm_spend_metric_total", {"model": "gpt-4o", "team": "t1"}, 1),
        counter("litellm_spend_metric_total", {"model": "llama", "team": "t1"}, 3),
    ]
    prom = start_prometheus(series)
    mine = "sum by ($target) (rate(litellm_spend_metric_total[5m]))"
    share = f"{mine} / ignoring ($target) group_left () @unscoped(sum(rate(litellm_spend_metric_total[5m])))"
    in_scope = f"{mine} / ignoring ($target) group_left () sum(rate(litellm_spend_metric_total[5m]))"
    t = tree(
        "cost_increase", ["model"], mine, {"share": (share, {"above": 0.5}), "in_scope": (in_scope, {"above": 0.5})}
    )
    checks = checks_of(diagnose(prom.url, t, {"model": "gpt-4o"}), model="gpt-4o")
    assert value(checks["share"]) == pytest.approx(0.25)
    assert checks["share"].verdict is Verdict.CLEAR
    # The same share without @unscoped is what the scope leaves of the whole: itself.
    assert value(checks["in_scope"]) == pytest.approx(1)


def test_a_missing_join_alternative_is_no_absent_metric(start_prometheus: StartPrometheus) -> None:
    # kube_node_info and kube_pod_container_resource_requests are absent: kube_pod_info alone joins.
    # Without node_exporter the check's own metric is what is absent, named as such.
    prom = start_prometheus([*engine_pods(), pod_info("vllm-0", "gpu-1", "10.0.0.5")])
    t = tree("nccl_failure", ["namespace", "pod"], ENGINE, {"ib_link": (IB_DOWN, {"above": 0})})
    check = checks_of(diagnose(prom.url, t, POD_SCOPE), namespace="prod", pod="vllm-0")["ib_link"]
    assert check.verdict is Verdict.UNKNOWN
    assert check.reason is not None
    assert check.reason.value == "metric_absent"
    assert "node_infiniband_state_id" in str(check.detail)
    assert "kube_node_info" not in str(check.detail)


CANARY_SHARE = (
    "sum by ($target) (rate(vllm:generation_tokens_total{@canary}[5m]))"
    " / sum by ($target) (rate(vllm:generation_tokens_total{@stable}[5m]))"
)
CANARY_PODS = "count by ($target) (vllm:generation_tokens_total{@canary})"


def canary_fleet() -> list[Series]:
    """One model: two stable pods and a canary, told apart by pod name only (no track label)."""
    labels = {"namespace": "prod", "model_name": "m"}
    return [
        counter("vllm:generation_tokens_total", {**labels, "pod": "vllm-m-7d9f8c6b5-x2x4z"}, 100),
        counter("vllm:generation_tokens_total", {**labels, "pod": "vllm-m-7d9f8c6b5-q8w2e"}, 100),
        counter("vllm:generation_tokens_total", {**labels, "pod": "vllm-m-canary-5c6d7-k9j8h"}, 50),
    ]


def test_the_canary_by_pod_name_pattern_reaches_the_engine(start_prometheus: StartPrometheus) -> None:
    """A cluster without the `track` label: the default reads no canary, the configured pattern finds it."""
    prom = start_prometheus(canary_fleet())
    t = tree("canary_regression", ["namespace", "model_name"], CANARY_SHARE, {"pods": (CANARY_PODS, {"above": 0})})

    async def run(topology: Topology) -> Diagnosis:
        config = PrometheusConfig(url=prom.url, timeout=10.0)
        async with config.client() as client:
            evaluator = Evaluator(PrometheusSource(config, client), topology=topology)
            return await evaluator.diagnose(t, Scope(), AT)

    by_label = asyncio.run(run(Topology()))
    assert not by_label.targets  # no series carries track="canary": no canary, nothing to compare
    by_name = asyncio.run(run(Topology(canary_pod_pattern=".+-canary-.+")))
    (target,) = by_name.targets
    assert target.detect is not None
    assert target.detect.evidence is not None
    assert target.detect.evidence.value == pytest.approx(50 / 200)
    assert value(checks_of(by_name, namespace="prod", model_name="m")["pods"]) == 1
