"""The gateway's books after a tick: LiteLLM's counters, histograms and gauges by exposed series.

Label sets are LiteLLM's defaults (metrics-infra.md 2.2, `litellm/types/integrations/prometheus.py`);
unset labels carry the literal "None", as the proxy's own tests assert.
"""

from __future__ import annotations

import uuid

from diagnosd.sim.exposition import Labels
from diagnosd.sim.fleet import ApiKey, Layout, Pod
from diagnosd.sim.gateway import (
    PROVIDER,
    Flow,
    Gateway,
    Knobs,
    exception_class,
    final_failure,
    remaining,
)
from diagnosd.sim.histogram import CLIENT_DEFAULT, LITELLM_LATENCY
from diagnosd.sim.model import Engine

NONE = "None"


_cache: dict[tuple[str, str, str, str, tuple[tuple[str, str], ...]], Labels] = {}


def _labels(flow: Flow, order: str, **extra: str) -> Labels:
    """The label set `order` names (in that order) for a flow, built once per combination."""
    key = (flow.key.hashed, flow.group, flow.pod.key, order, tuple(sorted(extra.items())))
    found = _cache.get(key)
    if found is None:
        pairs = _pairs(flow.key, flow.group, flow.pod, extra)
        found = _cache[key] = tuple((name, pairs[name]) for name in order.split())
    return found


def _pairs(key: ApiKey, group: str, pod: Pod, extra: dict[str, str]) -> dict[str, str]:
    team = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"team.{key.spec.team}"))
    return {
        "hashed_api_key": key.hashed,
        "api_key_alias": key.spec.alias,
        "team": team,
        "team_alias": key.spec.team,
        "client_ip": f"10.8.0.{10 + int(key.hashed[:4], 16) % 200}",
        "user_agent": "OpenAI/Python 1.61.0",
        "end_user": NONE,
        "user": "default_user_id",
        "user_email": NONE,
        "route": "/chat/completions",
        "requested_model": group,
        "model": pod.litellm_model,
        "litellm_model_name": pod.litellm_model,
        "model_id": pod.model_id,
        "api_base": pod.api_base,
        "api_provider": PROVIDER,
        **extra,
    }


# Default label sets, in LiteLLM's order (litellm/types/integrations/prometheus.py @ed19250b).
WHO = "hashed_api_key api_key_alias team team_alias"
PROXY = (
    f"end_user {WHO.replace(' team', ' requested_model team', 1)} user status_code user_email route client_ip"
    " user_agent model_id"
)
PROXY_FAILED = (
    f"end_user {WHO.replace(' team', ' requested_model team', 1)} user user_email exception_status exception_class"
    " route client_ip user_agent model_id"
)
SPEND = f"end_user {WHO.replace(' team', ' model team', 1)} user user_email client_ip user_agent model_id"
TOKENS = f"end_user {WHO.replace(' team', ' model team', 1)} user user_email requested_model model_id"
TOTAL_LATENCY = f"end_user {WHO.replace(' team', ' requested_model team', 1)} user model model_id"
API_LATENCY = f"model {WHO} requested_model end_user user model_id"
STATE = "litellm_model_name model_id api_base api_provider"
DEPLOYMENT = f"requested_model {STATE} {WHO} client_ip user_agent"
DEPLOYMENT_FAILED = f"requested_model {STATE} exception_status exception_class {WHO} client_ip user_agent"
PER_TOKEN = f"{STATE} {WHO}"
FALLBACK = f"requested_model fallback_model {WHO} exception_status exception_class model_id"
REMAINING = "hashed_api_key api_key_alias model model_id"


def account(gw: Gateway, layout: Layout, knobs: Knobs, engines: dict[str, Engine | None], dt: float) -> None:
    failures: dict[str, float] = {}
    for flow in gw.flows:
        failures[flow.pod.key] = failures.get(flow.pod.key, 0.0) + _flow(gw, layout, knobs, engines, flow, dt)
    for pod in layout.pods:
        _cooldown(gw, layout, knobs, pod, failures.get(pod.key, 0.0), dt)


def _flow(gw: Gateway, layout: Layout, knobs: Knobs, engines: dict[str, Engine | None], flow: Flow, dt: float) -> float:
    """Books one flow; returns the failed calls per second it sent to its pod."""
    pod, g = flow.pod, knobs.groups[flow.group]
    engine = engines[pod.key]
    lb, late = gw.health[pod.key]
    if not g.exported:
        return flow.attempts * (lb + late)  # no proxy exporting it yet: routed, never counted
    down = 1.0 if engine is None else 0.0
    status = knobs.pods[pod.key].gateway_failure_status if not down else "503"
    calls = flow.attempts * dt
    ok = calls * (1.0 - lb - late)
    gw.count("litellm_deployment_total_requests_total", _labels(flow, DEPLOYMENT), calls)
    gw.count("litellm_deployment_success_responses_total", _labels(flow, DEPLOYMENT), ok)
    for code, share in ((status, lb), ("408", late)):
        failed = _labels(flow, DEPLOYMENT_FAILED, exception_status=code, exception_class=exception_class(code))
        gw.count("litellm_deployment_failure_responses_total", failed, calls * share)
    _client_side(gw, layout, knobs, flow, dt, status if lb >= late else "408")
    if engine is not None and ok > 0.0:
        _usage(gw, flow, engine, g.usd_per_m_input, g.usd_per_m_output, ok, g.streaming_share)
    return flow.attempts * (lb + late)


def _client_side(gw: Gateway, layout: Layout, knobs: Knobs, flow: Flow, dt: float, status: str) -> None:
    failed = flow.client_rps * dt * final_failure(gw, knobs, flow.group)
    spec = next(x for x in (layout.fleet.gateway.groups if layout.fleet.gateway else []) if x.name == flow.group)
    final_fail = failed
    if spec.fallbacks and failed > 0.0:
        lost = final_failure(gw, knobs, spec.fallbacks[0])
        fb = _labels(
            flow,
            FALLBACK,
            fallback_model=spec.fallbacks[0],
            exception_status=status,
            exception_class=exception_class(status),
        )
        gw.count("litellm_deployment_successful_fallbacks_total", fb, failed * (1.0 - lost))
        gw.count("litellm_deployment_failed_fallbacks_total", fb, failed * lost)
        final_fail = failed * lost
    requests = flow.client_rps * dt
    gw.count(
        "litellm_proxy_total_requests_metric_total", _labels(flow, PROXY, status_code="200"), requests - final_fail
    )
    gw.count("litellm_requests_metric_total", _labels(flow, SPEND), requests - final_fail)
    codes = {"status_code": status, "exception_status": status, "exception_class": exception_class(status)}
    gw.count("litellm_proxy_total_requests_metric_total", _labels(flow, PROXY, **codes), final_fail)
    gw.count("litellm_proxy_failed_requests_metric_total", _labels(flow, PROXY_FAILED, **codes), final_fail)
    _rejected(gw, knobs, flow, dt)
    key = knobs.keys[flow.key.spec.alias]
    per_minute = flow.client_rps * 60.0
    # `model` here is the model group (get_model_group_from_litellm_kwargs), not the deployment's model.
    labels = _labels(flow, REMAINING, model=flow.group)
    # Only model-specific limits show here: a key-wide rpm_limit / tpm_limit leaves sys.maxsize.
    gw.gauges[("litellm_remaining_api_key_requests_for_model", labels)] = remaining(key.model_rpm_limit, per_minute)
    gw.gauges[("litellm_remaining_api_key_tokens_for_model", labels)] = remaining(
        key.model_tpm_limit, per_minute * 2500.0
    )


def _rejected(gw: Gateway, knobs: Knobs, flow: Flow, dt: float) -> None:
    """Requests the gateway refused for the key itself (bad requests): they reach no deployment."""
    key = knobs.keys[flow.key.spec.alias]
    if key.failure_share <= 0.0 or key.failure_share >= 1.0:
        return
    good = flow.client_rps * dt
    bad = good * key.failure_share / (1.0 - key.failure_share)
    rejected = dict(status_code="400", exception_status="400", exception_class=exception_class("400"))
    gw.count("litellm_proxy_total_requests_metric_total", _labels(flow, PROXY, **rejected), bad)
    gw.count("litellm_proxy_failed_requests_metric_total", _labels(flow, PROXY_FAILED, **rejected), bad)


def _usage(gw: Gateway, flow: Flow, engine: Engine, usd_in: float, usd_out: float, ok: float, streaming: float) -> None:
    t = engine.tick
    prompt, output = ok * t.prompt_mean, ok * t.output_mean
    tokens = _labels(flow, TOKENS)
    gw.count("litellm_input_tokens_metric_total", tokens, prompt)
    gw.count("litellm_output_tokens_metric_total", tokens, output)
    gw.count("litellm_total_tokens_metric_total", tokens, prompt + output)
    gw.count("litellm_spend_metric_total", _labels(flow, SPEND), (prompt * usd_in + output * usd_out) / 1e6)
    overhead = 0.012
    gw.observe(
        "litellm_request_total_latency_metric", _labels(flow, TOTAL_LATENCY), LITELLM_LATENCY, ok, t.e2e + overhead
    )
    gw.observe("litellm_llm_api_latency_metric", _labels(flow, API_LATENCY), LITELLM_LATENCY, ok, t.e2e)
    per_token = (streaming * t.ttft + (1.0 - streaming) * t.e2e) / max(t.output_mean, 1.0)
    gw.observe("litellm_deployment_latency_per_output_token", _labels(flow, PER_TOKEN), CLIENT_DEFAULT, ok, per_token)


def _cooldown(gw: Gateway, layout: Layout, knobs: Knobs, pod: Pod, failed_rps: float, dt: float) -> None:
    group = layout.group_of(pod)
    if group is None:
        return
    g = knobs.groups[group.name]
    events = failed_rps / (g.allowed_fails + 1.0)
    gw.cooled[pod.key] = min(0.9, events * g.cooldown_time)
    if not g.exported:
        return
    status = knobs.pods[pod.key].gateway_failure_status
    labels = _state_labels(pod)
    # router_cooldown_event_callback labels the cooldown with the deployment's model_name (the
    # group alias), not with the underlying model the call counters carry.
    cooled = (("litellm_model_name", group.name), *labels[1:])
    gw.count("litellm_deployment_cooled_down_total", (*cooled, ("exception_status", status)), events * dt)
    state = 2.0 if events * dt >= 1.0 else (1.0 if failed_rps * dt >= 1.0 else 0.0)
    gw.gauges[("litellm_deployment_state", labels)] = state


def _state_labels(pod: Pod) -> Labels:
    return (
        ("litellm_model_name", pod.litellm_model),
        ("model_id", pod.model_id),
        ("api_base", pod.api_base),
        ("api_provider", PROVIDER),
    )
