"""kube-state-metrics for the simulated pods, their nodes, Deployments and autoscalers.

Names and labels follow internal/store/{pod,node,deployment,horizontalpodautoscaler}.go at
c92fe0c5 (metrics-infra.md section 3, samples/kube-state-metrics); values print as Go's %g.
A pod waiting for a GPU has no node: its node is out of the cluster (drained or scaled away).
A new pod whose image is being pulled is on its node (kube_pod_start_time set) but still Pending,
its container waiting (ContainerCreating) with no kube_pod_container_state_started yet: the
kubelet starts the container once the pull is done.
"""

from __future__ import annotations

from diagnosd.sim.exposition import Collector, Family, Format, Kind, Labels
from diagnosd.sim.simulator import PodState, Simulator

SCRAPE: Labels = (("instance", "10.0.3.4:8080"), ("job", "kube-state-metrics"))
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def families(sim: Simulator, wanted: frozenset[str] | None = None) -> list[Family]:
    out = Collector(wanted)
    for state in sim.pods.values():
        _pod(out, state, sim.time)
    for state in sim.pods.values():
        if not state.pending:
            _node(out, state)
    _workloads(out, sim)
    return out.families()


def _g(out: Collector, name: str, help: str) -> Family:
    return out.family(name, Kind.GAUGE, help, Format.GO)


def _labels(**pairs: str) -> Labels:
    return tuple(sorted(pairs.items())) + SCRAPE


def _pod(out: Collector, state: PodState, now: float) -> None:
    pod = state.pod
    node = "" if state.pending else pod.node
    own = {"namespace": pod.namespace, "pod": state.name, "uid": state.uid}
    info = dict(
        own,
        host_ip="" if state.pending else pod.node_ip,
        pod_ip="" if state.pending else pod.ip,
        node=node,
        created_by_kind="ReplicaSet",
        created_by_name=state.name.rsplit("-", 1)[0],
        priority_class="",
        host_network="false",
    )
    _g(out, "kube_pod_info", "[STABLE] Information about pod.").add(_labels(**info), 1)
    owner = dict(own, owner_kind="ReplicaSet", owner_name=info["created_by_name"], owner_is_controller="true")
    _g(out, "kube_pod_owner", "[STABLE] Information about the Pod's owner.").add(_labels(**owner), 1)
    _g(out, "kube_pod_created", "[STABLE] Unix creation timestamp").add(_labels(**own), state.created)
    if state.scheduled is not None:
        _g(out, "kube_pod_status_scheduled_time", "[STABLE] Unix timestamp when pod moved into scheduled status").add(
            _labels(**own), state.scheduled
        )
        _g(out, "kube_pod_start_time", "[STABLE] Start time in unix timestamp for a pod.").add(
            _labels(**own), state.scheduled + 1.0
        )
    if state.ready_since is not None:
        _g(out, "kube_pod_status_ready_time", "Readiness achieved time in unix timestamp for a pod.").add(
            _labels(**own), state.ready_since
        )
    ready = state.engine is not None
    for condition, value in (("true", ready), ("false", not ready), ("unknown", False)):
        _g(out, "kube_pod_status_ready", "[STABLE] Describes whether the pod is ready to serve requests.").add(
            _labels(**own, condition=condition), float(value)
        )
    started = _container_started(state)
    # The pod phase stays Pending until its containers start (image pulls included).
    phase = "Pending" if state.pending or started > now else "Running"
    for name in PHASES:
        _g(out, "kube_pod_status_phase", "[STABLE] The pods current phase.").add(
            _labels(**own, phase=name), float(name == phase)
        )
    _container(out, state, own, node, started, now)


def _container_started(state: PodState) -> float:
    """When the engine container (last) started: a new pod's first start waits for its image pull.

    The pull is the first `image_pull_s` of the replacement's load; a restart reuses the image.
    """
    pull = state.knobs.image_pull_s
    if pull <= 0.0 or state.restarts or state.loading is None:
        return state.container_started
    start, end = state.loading
    return state.container_started + min(pull, max(0.0, end - start - 1.0))


def _container(out: Collector, state: PodState, own: dict[str, str], node: str, started: float, now: float) -> None:
    container = "vllm" if state.pod.deployment.engine == "vllm" else "sglang"
    c = dict(own, container=container)
    running = not state.pending and started <= now
    out.family(
        "kube_pod_container_status_restarts_total",
        Kind.COUNTER,
        "[STABLE] The number of container restarts per container.",
        Format.GO,
    ).add(_labels(**c), state.restarts)
    for name, flag in (
        ("running", running),
        ("waiting", not running),
        ("terminated", False),
        ("ready", state.engine is not None),
    ):
        _g(
            out,
            f"kube_pod_container_status_{name}",
            f"[STABLE] Describes whether the container is currently in {name} state.",
        ).add(_labels(**c), float(flag))
    if not running:
        # A container that exited waits out the kubelet's restart back-off; a new one is created.
        reason = "CrashLoopBackOff" if state.restarts and not state.pending else "ContainerCreating"
        _g(
            out,
            "kube_pod_container_status_waiting_reason",
            "[STABLE] Describes the reason the container is currently in waiting state.",
        ).add(_labels(**c, reason=reason), 1)
    else:
        _g(out, "kube_pod_container_state_started", "[STABLE] Start time in unix timestamp for a pod container.").add(
            _labels(**c), started
        )
    if state.last_exit is not None:
        exit_ = state.last_exit
        _g(
            out,
            "kube_pod_container_status_last_terminated_reason",
            "Describes the last reason the container was in terminated state.",
        ).add(_labels(**c, reason=exit_.reason), 1)
        _g(
            out,
            "kube_pod_container_status_last_terminated_exitcode",
            "Describes the exit code for the last container in terminated state.",
        ).add(_labels(**c), exit_.code)
        _g(
            out,
            "kube_pod_container_status_last_terminated_timestamp",
            "Last terminated time for a pod container in unix timestamp.",
        ).add(_labels(**c), exit_.at)
    d = state.pod.deployment
    for kind, help in (
        (
            "requests",
            (
                "[STABLE] The number of requested request resource by a container. It is recommended to use the "
                "kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is more precise."
            ),
        ),
        (
            "limits",
            (
                "[STABLE] The number of requested limit resource by a container. It is recommended to use the "
                "kube_pod_resource_limits metric exposed by kube-scheduler instead, as it is more precise."
            ),
        ),
    ):
        family = _g(out, f"kube_pod_container_resource_{kind}", help)
        for resource, unit, value in (
            ("cpu", "core", 8.0 if kind == "requests" else 16.0),
            ("memory", "byte", 64 * 2**30 if kind == "requests" else 96 * 2**30),
            ("nvidia_com_gpu", "integer", float(state.knobs.gpu_request or d.gpu.count)),
        ):
            family.add(_labels(**c, node=node, resource=resource, unit=unit), value)


def _node(out: Collector, state: PodState) -> None:
    node = state.pod.node
    gpus = float(state.pod.deployment.gpu.count)
    for name, help in (
        ("kube_node_status_capacity", "[STABLE] The capacity for different resources of a node."),
        (
            "kube_node_status_allocatable",
            "[STABLE] The allocatable for different resources of a node that are available for scheduling.",
        ),
    ):
        family = _g(out, name, help)
        for resource, unit, value in (
            ("cpu", "core", 64.0 if "capacity" in name else 63.5),
            ("memory", "byte", 512 * 2**30 if "capacity" in name else 500 * 2**30),
            ("nvidia_com_gpu", "integer", gpus),
            ("pods", "integer", 110.0),
        ):
            family.add(_labels(node=node, resource=resource, unit=unit), value)


def _workloads(out: Collector, sim: Simulator) -> None:
    fleet = sim.scenario.fleet
    assert fleet is not None
    for d in fleet.deployments:
        states = [s for s in sim.pods.values() if s.pod.deployment.name == d.name]
        ready = float(sum(s.engine is not None for s in states))
        own = {"deployment": d.name, "namespace": fleet.namespace}
        for replicaset in sorted({s.name.rsplit("-", 1)[0] for s in states}):
            owner = {
                "namespace": fleet.namespace,
                "replicaset": replicaset,
                "owner_kind": "Deployment",
                "owner_name": d.name,
                "owner_is_controller": "true",
            }
            _g(out, "kube_replicaset_owner", "[STABLE] Information about the ReplicaSet's owner.").add(
                _labels(**owner), 1
            )
        hpa = sim.deployments.get(d.name)
        spec = d.replicas if hpa is None or hpa.spec_replicas is None else hpa.spec_replicas
        for name, value in (
            ("spec_replicas", float(spec)),
            ("status_replicas", float(len(states))),
            ("status_replicas_ready", ready),
            ("status_replicas_available", ready),
            ("status_replicas_unavailable", len(states) - ready),
            ("status_replicas_updated", float(len(states))),
        ):
            _g(out, f"kube_deployment_{name}", f"[STABLE] Deployment {name.replace('_', ' ')}.").add(
                _labels(**own), value
            )
        if hpa is not None:
            _hpa(out, fleet.namespace, d.name, d.replicas, hpa.hpa_min, hpa.hpa_max, hpa.hpa_pending)


def _hpa(out: Collector, namespace: str, name: str, current: int, low: int, high: int, pending: int) -> None:
    own = {"horizontalpodautoscaler": name, "namespace": namespace}
    desired = max(low, min(high, current + pending))
    target = dict(own, scaletargetref_api_version="apps/v1", scaletargetref_kind="Deployment", scaletargetref_name=name)
    _g(out, "kube_horizontalpodautoscaler_info", "Information about this autoscaler.").add(_labels(**target), 1)
    for metric, help, value in (
        (
            "spec_max_replicas",
            (
                "[STABLE] Upper limit for the number of pods that can be set by the autoscaler; cannot be smaller "
                "than MinReplicas."
            ),
            high,
        ),
        (
            "spec_min_replicas",
            "[STABLE] Lower limit for the number of pods that can be set by the autoscaler, default 1.",
            low,
        ),
        ("status_current_replicas", "[STABLE] Current number of replicas of pods managed by this autoscaler.", current),
        ("status_desired_replicas", "[STABLE] Desired number of replicas of pods managed by this autoscaler.", desired),
    ):
        _g(out, f"kube_horizontalpodautoscaler_{metric}", help).add(_labels(**own), float(value))
    limited = desired >= high
    for condition, state in (("AbleToScale", True), ("ScalingActive", True), ("ScalingLimited", limited)):
        for status in ("true", "false", "unknown"):
            _g(out, "kube_horizontalpodautoscaler_status_condition", "[STABLE] The condition of this autoscaler.").add(
                _labels(**own, condition=condition, status=status),
                float((status == "true") == state and status != "unknown"),
            )
