"""Engine lifecycles the simulator derives from the knobs: vLLM V1 refusing to start on a GPU that
another process holds, and an engine loop that is stuck while its API server still answers."""

from __future__ import annotations

from pathlib import Path

import yaml

from diagnosd.sim import scenario
from diagnosd.sim.simulator import Simulator
from tests.sim.conftest import ANCHOR, samples

POD = "pod/vllm-llama-8b/2"


def _sim(tmp_path: Path, faults: list[dict[str, object]]) -> Simulator:
    doc = {"extends": "healthy", "title": {"en": "x", "zh": "x"}, "faults": faults}
    path = tmp_path / "case.yaml"
    path.write_text(yaml.safe_dump(doc))
    return Simulator(scenario.load(str(path)), anchor=ANCHOR, history=7200.0, coarse=900.0)


def _sidecar(mib: float, utilization: float) -> list[dict[str, object]]:
    knobs = {"other_fb_mib": mib, "gpu_memory_utilization": utilization}
    return [
        {"target": POD, "start": "-40m", "what": "a process next to the engine", "set": knobs},
        {"target": POD, "start": "-40m", "what": "redeployed", "replace": {"pending": "5s", "load": "200s"}},
    ]


def _value(sim: Simulator, name: str, **labels: str) -> float | None:
    """The pod's samples of `name` with these labels, summed; None when it serves none."""
    wanted = {"pod": sim.pods[POD].name, **labels}
    found = [v for (n, ls), v in samples(sim).items() if n == name and wanted.items() <= dict(ls).items()]
    return sum(found) if found else None


def test_vllm_refuses_to_start_when_another_process_leaves_too_little_free(tmp_path: Path) -> None:
    """20 GiB held by another process, 0.92 asked: every start exits 1 within seconds, the kubelet
    backs off, and the GPU shows only the other process's memory (it never fills)."""
    sim = _sim(tmp_path, _sidecar(20870.0, 0.92))
    peak = 0.0
    for _ in sim.advance(ANCHOR):
        if sim.time >= ANCHOR - 2400:
            peak = max(peak, sim.pods[POD].gpus[0].reading.fb_used)
    state = sim.pods[POD]
    assert state.engine is None
    assert state.ready_since is None
    assert 8 <= state.restarts <= 16  # 10 s, 20 s, 40 s ... then every 5 minutes, over 40 minutes
    assert state.last_exit is not None
    assert (state.last_exit.reason, state.last_exit.code) == ("Error", 1)
    assert peak == 20870.0
    assert _value(sim, "DCGM_FI_DEV_FB_USED") == 20870.0
    assert _value(sim, "kube_pod_container_status_waiting_reason", reason="CrashLoopBackOff") == 1.0
    assert _value(sim, "vllm:num_requests_running") is None


def test_a_gpu_shared_on_purpose_with_room_to_spare_starts_and_serves(tmp_path: Path) -> None:
    sim = _sim(tmp_path, _sidecar(4096.0, 0.85))
    sim.run(ANCHOR)
    state = sim.pods[POD]
    assert state.engine is not None
    assert state.restarts == 0
    assert state.gpus[0].reading.fb_used > 0.85 * 81559.0 + 4096.0  # its reservation and the sidecar's
    assert (_value(sim, "vllm:num_requests_running") or 0.0) > 0


def test_a_stuck_engine_keeps_its_last_gauges_and_counts_nothing(tmp_path: Path) -> None:
    sim = _sim(tmp_path, [{"target": POD, "start": "-20m", "what": "stuck", "set": {"engine_hung": True}}])
    names = (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
    )
    sim.run(ANCHOR - 1200.0)
    before = {name: _value(sim, name) for name in names}
    sim.run(ANCHOR)
    assert {name: _value(sim, name) for name in names} == before
    assert (before["vllm:num_requests_running"] or 0.0) > 0
    state = sim.pods[POD]
    assert state.engine is not None
    assert state.restarts == 0
    assert state.engine.tick.served == 0.0
    assert state.engine.tick.arrivals > 0.0
