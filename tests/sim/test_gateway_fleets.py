"""What the gateway-side healthy fleets export: a fresh proxy, keys without per-model limits, spare GPUs."""

from __future__ import annotations

from diagnosd.sim.gateway import UNLIMITED
from tests.sim.conftest import ANCHOR, samples, short


def test_a_fresh_proxy_exports_nothing_before_its_start_and_counts_from_zero() -> None:
    # healthy_young_gateway's proxy starts 6 h before the anchor: a 7 h run ends 6 h after it.
    sim = short("healthy_young_gateway", history=7 * 3600.0, run=False)
    sim.run(ANCHOR - 6 * 3600.0 - 60.0)
    assert not [name for name, _ in samples(sim) if name.startswith("litellm_")]
    sim.run(ANCHOR)
    seen = samples(sim)
    # Counted from the start: the same fleet's proxy that ran all 7 h counted an hour more (the
    # quietest of the seven, far from the peak an hour before the anchor).
    healthy = samples(short("healthy", history=7 * 3600.0))
    young, old = (
        sum(v for (name, _), v in s.items() if name == "litellm_proxy_total_requests_metric_total")
        for s in (seen, healthy)
    )
    assert 0.0 < young < old * 0.95
    # The engines served the 7 h all along: the same requests in both.
    engine = [sum(v for (n, _), v in s.items() if n == "vllm:request_success_total") for s in (seen, healthy)]
    assert abs(engine[0] - engine[1]) < 0.02 * engine[1]


def test_keys_without_per_model_limits_read_sys_maxsize() -> None:
    seen = samples(short("healthy_keys_no_model_limits", history=3600.0))
    gauges = [v for (name, _), v in seen.items() if name.startswith("litellm_remaining_api_key_")]
    assert gauges
    assert all(v == UNLIMITED for v in gauges)


def test_spare_gpus_carry_no_pod_and_idle() -> None:
    seen = samples(short("healthy_idle_dev_gpus", history=3600.0))
    util = {labels: v for (name, labels), v in seen.items() if name == "DCGM_FI_DEV_GPU_UTIL"}
    spare = [v for labels, v in util.items() if "pod" not in dict(labels)]
    assert len(spare) == 10
    assert all(v == 0.0 for v in spare)
    assert len({dict(labels)["UUID"] for labels in util}) == len(util)


def test_model_names_are_exported_as_litellm_1_108_does() -> None:
    # kwargs["model"] after get_llm_provider: the configured hosted_vllm/<name> loses its provider
    # prefix, so the call counters carry the engines' served model_name; a cooldown is labelled by
    # router_cooldown_event_callback with the deployment's model_name (the group alias); the per-key
    # remaining gauges carry the model group as `model`.
    seen = samples(short("deployment_cooldown", history=3600.0))
    engines = ("vllm:request_success_total", "sglang:num_requests_total")
    served = {dict(labels)["model_name"] for (name, labels), _ in seen.items() if name in engines}
    calls = {
        dict(labels)["litellm_model_name"]
        for (name, labels), _ in seen.items()
        if name == "litellm_deployment_total_requests_total"
    }
    spent = {dict(labels)["model"] for (name, labels), _ in seen.items() if name == "litellm_spend_metric_total"}
    assert calls
    assert calls <= served
    assert spent <= served
    groups = {
        dict(labels)["requested_model"]
        for (name, labels), _ in seen.items()
        if name == "litellm_proxy_total_requests_metric_total"
    }
    cooled = {
        dict(labels)["litellm_model_name"]
        for (name, labels), _ in seen.items()
        if name == "litellm_deployment_cooled_down_total"
    }
    assert cooled
    assert cooled <= groups
    remaining = {
        dict(labels)["model"] for (name, labels), _ in seen.items() if name.startswith("litellm_remaining_api_key_")
    }
    assert remaining
    assert remaining <= groups
