"""The decode side of prefill/decode disaggregation: pulling each request's KV (vLLM's NIXL connector).

A decode instance pulls the KV of every arriving request's prompt from a prefill instance over its
node's NIC; what its own prefix cache already holds is not pulled. The pulls share the link with
the node's other traffic, so they slow down as the link fills (a fluid queue); an FP8 cache halves
the bytes. A request whose KV has arrived waits for a batch slot with the engine's other waiting
requests (vllm:num_requests_kv_fetch_by_stage{stage="completed_waiting"}).
"""

from __future__ import annotations

from diagnosd.sim.distributions import shape, with_inf
from diagnosd.sim.model import Engine, kv_bytes
from diagnosd.sim.spec import GpuSpec, ModelSpec, PodKnobs

# NixlPromMetrics: buckets[1:] of [0.001, 0.005, ..., 1.0, 5.0] (vllm/distributed/kv_transfer/.../nixl/stats.py).
XFER_BOUNDS = with_inf([0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0])
SETUP_S = 0.004  # posting the transfer and its notification
BUSIEST = 0.95  # the share of the free link a fluid queue of pulls is assumed to reach at most


def pull(engine: Engine, k: PodKnobs, model: ModelSpec, gpu: GpuSpec, dt: float) -> float:
    """Observe the last tick's transfers; return the bytes/s they moved into the node."""
    t = engine.tick
    per_request = t.prompt_mean * (1.0 - t.hit) * kv_bytes(k, model) * gpu.count
    free = max(k.nic_gbps - k.nic_background_gbps, 0.02 * k.nic_gbps) * 1e9 / 8.0
    load = min(BUSIEST, t.arrivals * per_request / free)
    seconds = SETUP_S + per_request / free / (1.0 - load)
    engine.kv_in_flight = t.arrivals * seconds
    engine.hist("xfer", XFER_BOUNDS).observe(t.arrivals * dt, shape(seconds, 0.4))
    return t.arrivals * per_request
