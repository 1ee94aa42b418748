"""kube-state-metrics during a new pod's image pull (the `image_pull_s` knob, healthy_slow_pulls).

As in internal/store/pod.go: the pod is on its node (kube_pod_start_time) but Pending, its
container waiting in ContainerCreating with no kube_pod_container_state_started until the kubelet
has pulled the image; then the container starts and the engine loads.
"""

from __future__ import annotations

from diagnosd.sim import ksm, scenario
from diagnosd.sim.simulator import Simulator

ANCHOR = 1767225600.0
REPLACED = ANCHOR - 3000.0  # pod/vllm-llama-8b/0 in healthy_slow_pulls: 240 s pull, 330 s load


def _pod_series(sim: Simulator, at: float) -> dict[str, float]:
    """The replaced pod's kube-state-metrics values at `at`, by name (phase and reason folded in)."""
    sim.run(at)
    values: dict[str, float] = {}
    for family in ksm.families(sim):
        for sample in family.samples:
            labels = dict(sample.labels)
            if labels.get("pod", "").startswith("vllm-llama-8b-") and labels.get("uid") == _uid(sim):
                key = family.name + "".join(f"/{labels[k]}" for k in ("phase", "reason") if k in labels)
                values[key] = sample.value
    return values


def _uid(sim: Simulator) -> str:
    return sim.pods["pod/vllm-llama-8b/0"].uid


def test_a_new_pod_waits_in_container_creating_while_its_image_is_pulled() -> None:
    sim = Simulator(scenario.load("healthy_slow_pulls"), anchor=ANCHOR, history=7200.0)
    pulling = _pod_series(sim, REPLACED + 120.0)
    assert pulling["kube_pod_status_phase/Pending"] == 1.0
    assert pulling["kube_pod_container_status_waiting_reason/ContainerCreating"] == 1.0
    assert "kube_pod_container_state_started" not in pulling
    start = pulling["kube_pod_start_time"]

    loaded = _pod_series(sim, REPLACED + 600.0)
    assert loaded["kube_pod_status_phase/Running"] == 1.0
    pull = loaded["kube_pod_container_state_started"] - start
    load = loaded["kube_pod_status_ready_time"] - loaded["kube_pod_container_state_started"]
    assert 235.0 <= pull <= 245.0  # the pull, not the model load
    assert 80.0 <= load <= 100.0
