"""What a series describes, from its metric name: the target itself, or something it runs on.

In a Prometheus Operator setup node_exporter and kube-state-metrics node, workload and HPA series
carry the exporter's own target labels (`namespace="monitoring"`, `pod="node-exporter-x7k2p"`,
`service`, `endpoint`): a pod-scoped diagnosis must not filter them by the target's namespace and
pod, or every join through them reads "no data". Only TARGET series are narrowed by the scope.
"""

from __future__ import annotations

from enum import Enum


class Level(Enum):
    TARGET = "target"  # names the diagnosed pod / gateway model: vLLM, SGLang, LiteLLM, kube_pod_*, DCGM with pod
    NODE = "node"  # node_exporter, kube_node_*
    WORKLOAD = "workload"  # kube_deployment_*, kube_replicaset_*, kube_statefulset_*, ...
    AUTOSCALER = "autoscaler"  # kube_horizontalpodautoscaler_*, keda_*


# Longest prefix wins; a name matching none is a TARGET series (engines and gateways).
_PREFIXES: tuple[tuple[str, Level], ...] = (
    ("node_", Level.NODE),
    ("kube_node_", Level.NODE),
    ("kube_deployment_", Level.WORKLOAD),
    ("kube_replicaset_", Level.WORKLOAD),
    ("kube_statefulset_", Level.WORKLOAD),
    ("kube_daemonset_", Level.WORKLOAD),
    ("kube_job_", Level.WORKLOAD),
    ("kube_horizontalpodautoscaler_", Level.AUTOSCALER),
    ("keda_", Level.AUTOSCALER),
)

# Families whose exporter's own labels clash with the pod labels it reports: with `honorLabels:
# false` Prometheus renames the exporter's `namespace`/`pod`/`container` to `exported_*` and the
# scrape target's labels take the plain names. Their selectors are normalised back by the engine.
_RENAMED_PREFIXES = ("DCGM_", "kube_")
RENAMED_LABELS = ("namespace", "pod", "container")


def level_of(name: str | None) -> Level:
    """The level of a metric name (None: a selector without a name, treated as a target series)."""
    if not name:
        return Level.TARGET
    best: tuple[int, Level] = (0, Level.TARGET)
    for prefix, level in _PREFIXES:
        if name.startswith(prefix) and len(prefix) > best[0]:
            best = (len(prefix), level)
    return best[1]


def exporter_labels_renamed(name: str | None) -> bool:
    """Whether series of `name` may carry the pod's labels as `exported_namespace` / `exported_pod`."""
    return bool(name) and any(name.startswith(p) for p in _RENAMED_PREFIXES)  # type: ignore[union-attr]
