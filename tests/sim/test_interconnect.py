"""The GPU interconnect as the simulator shows it: spare IB ports, link errors, expert load, demand dips.

Spare HCA ports read as node_exporter's infiniband collector reads a port with no cable; a
marginal cable counts errors and recoveries without downing its link, a flapping one downs it; the
tensor pipes of an expert-parallel pod follow SGLang's balancedness; and a dip in demand lowers a
multi-GPU pod's tokens/s but not the speed of each request it serves.
"""

from __future__ import annotations

from diagnosd.sim.simulator import Simulator
from tests.sim.conftest import ANCHOR, samples, short


def _node(sim: Simulator, deployment: str, replica: int) -> str:
    [state] = [s for s in sim.pods.values() if s.pod.deployment.name == deployment and s.pod.replica == replica]
    return f"{state.pod.node}:9100"


def _port(sim: Simulator, instance: str, device: str) -> dict[str, float]:
    found = samples(sim)
    return {
        name.removeprefix("node_infiniband_"): value
        for (name, labels), value in found.items()
        if name.startswith("node_infiniband_")
        and name != "node_infiniband_info"
        and ("instance", instance) in labels
        and ("device", device) in labels
    }


def test_a_spare_port_is_down_and_polling_with_every_counter_at_zero() -> None:
    sim = short("healthy_spare_ib_port")
    instance = _node(sim, "vllm-llama-70b", 0)
    used, spare = _port(sim, instance, "mlx5_0"), _port(sim, instance, "mlx5_1")
    assert (used["state_id"], used["physical_state_id"]) == (4, 5)
    assert (spare["state_id"], spare["physical_state_id"]) == (1, 2)
    assert used["port_data_transmitted_bytes_total"] > 0
    assert all(v == 0 for k, v in spare.items() if k.endswith("_total"))
    assert _port(sim, instance, "mlx5_2") == {}  # one spare on this node
    assert set(_port(sim, _node(sim, "vllm-llama-8b", 0), "mlx5_2")) == set(spare)


def _port_counters(scenario_name: str) -> tuple[dict[str, float], dict[str, float]]:
    """The faulty pod's used IB port 30 minutes into its fault and now."""
    sim = short(scenario_name, run=False)
    sim.run(ANCHOR - 1800.0)
    instance = _node(sim, "vllm-llama-70b", 1)
    before = _port(sim, instance, "mlx5_0")
    sim.run(ANCHOR)
    return before, _port(sim, instance, "mlx5_0")


def test_a_marginal_cable_counts_errors_and_recoveries_but_never_downs_its_link() -> None:
    # The IB spec's LinkErrorRecoveryCounter counts retrains that succeeded, LinkDownedCounter the
    # ones that failed: a cable whose retrains succeed leaves the second alone.
    before, now = _port_counters("switch_crc_errors")
    assert now["symbol_error_total"] - before["symbol_error_total"] > 1000
    assert now["link_downed_total"] == before["link_downed_total"] == 0
    assert now["state_id"] == 4
    # The PortCounters stop at their width: 0.8 recoveries a second fill the 8-bit one in minutes.
    assert now["link_error_recovery_total"] == 255
    assert now["symbol_error_total"] < 65535


def test_a_flapping_link_counts_link_downs_besides_its_errors() -> None:
    before, now = _port_counters("ib_link_flapping")
    assert 20 <= now["link_downed_total"] - before["link_downed_total"] <= 40  # 60 an hour, for 30 minutes
    assert now["symbol_error_total"] > before["symbol_error_total"]


def _tensor(sim: Simulator, deployment: str) -> list[tuple[float, float]]:
    found = samples(sim)
    out = []
    for state in sim.pods.values():
        if state.pod.deployment.name != deployment:
            continue
        by_gpu = {
            dict(labels)["gpu"]: value
            for (name, labels), value in found.items()
            if name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" and ("pod", state.name) in labels
        }
        out.append((by_gpu["0"], by_gpu["1"]))
    return out


def test_the_tensor_pipes_follow_the_expert_balancedness() -> None:
    # Two GPUs: the idler one does (2 b - 1) of the busiest's work, 0.8 at b = 0.9.
    for gpu0, gpu1 in _tensor(short("healthy_moe"), "sglang-qwen3-moe"):
        assert gpu0 > 0.1
        assert abs(gpu1 / gpu0 - 0.8) < 1e-6
    hot, balanced = _tensor(short("expert_load_unbalanced"), "sglang-qwen3-moe")
    assert hot[0] > 0.1
    assert hot[1] == 0.0  # b = 0.4: the second GPU waits all pass long
    assert abs(balanced[1] / balanced[0] - 0.8) < 1e-6
    # Tensor-parallel ranks of a dense model do the same matrix work.
    for gpu0, gpu1 in _tensor(short("healthy"), "vllm-llama-70b"):
        assert gpu0 == gpu1 > 0.0


def _per_request(scenario_name: str) -> tuple[float, float]:
    """Generation tokens/s of the tensor-parallel pods over the last 10 minutes, and per running request."""
    sim = short(scenario_name, run=False)
    sim.run(ANCHOR - 600.0)
    before = samples(sim)
    sim.run(ANCHOR)
    after = samples(sim)
    tokens = running = 0.0
    for key, value in after.items():
        name, labels = key
        if not any(k == "pod" and v.startswith("vllm-llama-70b") for k, v in labels):
            continue
        if name == "vllm:generation_tokens_total":
            tokens += (value - before[key]) / 600.0
        elif name == "vllm:num_requests_running":
            running += value
    return tokens, tokens / running


def test_a_demand_dip_lowers_tokens_per_second_not_the_speed_of_each_request() -> None:
    busy, busy_each = _per_request("healthy")
    quiet, quiet_each = _per_request("healthy_traffic_dip")
    assert 0.3 < quiet / busy < 0.5
    assert quiet_each > 0.9 * busy_each
