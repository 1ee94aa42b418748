"""The LiteLLM proxy's /metrics (callbacks: ["prometheus"]): the gateway's ledger as families.

Counters are exposed with `_total` (prometheus_client), latency histograms with LATENCY_BUCKETS
and `litellm_deployment_latency_per_output_token` with prometheus_client's default buckets. The
metrics kept are the request, deployment, fallback, cooldown, token, spend, latency and per-key
limit families (prometheus_metrics_config can switch the others off).
"""

from __future__ import annotations

import math

from diagnosd.sim.exposition import Collector, Family, Kind, Labels, histogram
from diagnosd.sim.simulator import Simulator

SCRAPE: Labels = (("instance", "10.0.4.2:4000"), ("job", "litellm"))
HELP = {
    "litellm_proxy_total_requests_metric_total": (
        "Total number of requests made to the proxy server - track number of client side requests"
    ),
    "litellm_proxy_failed_requests_metric_total": (
        "Total number of failed responses from proxy - the client did not get a success response from litellm proxy"
    ),
    "litellm_requests_metric_total": (
        "deprecated - use litellm_proxy_total_requests_metric. Total number of LLM calls to litellm - track "
        "total per API Key, team, user"
    ),
    "litellm_spend_metric_total": "Total spend on LLM requests",
    "litellm_total_tokens_metric_total": "Total number of input + output tokens from LLM requests",
    "litellm_input_tokens_metric_total": "Total number of input tokens from LLM requests",
    "litellm_output_tokens_metric_total": "Total number of output tokens from LLM requests",
    "litellm_deployment_success_responses_total": (
        "LLM Deployment Analytics - Total number of successful LLM API calls via litellm"
    ),
    "litellm_deployment_failure_responses_total": (
        "LLM Deployment Analytics - Total number of failed LLM API calls for a specific LLM deploymeny. "
        "exception_status is the status of the exception from the llm api"
    ),
    "litellm_deployment_total_requests_total": (
        "LLM Deployment Analytics - Total number of LLM API calls via litellm - success + failure"
    ),
    "litellm_deployment_cooled_down_total": (
        "LLM Deployment Analytics - Number of times a deployment has been cooled down by LiteLLM load "
        "balancing logic. exception_status is the status of the exception that caused the deployment to be "
        "cooled down"
    ),
    "litellm_deployment_successful_fallbacks_total": (
        "LLM Deployment Analytics - Number of successful fallback requests from primary model -> fallback model"
    ),
    "litellm_deployment_failed_fallbacks_total": (
        "LLM Deployment Analytics - Number of failed fallback requests from primary model -> fallback model"
    ),
    "litellm_request_total_latency_metric": "Total latency (seconds) for a request to LiteLLM",
    "litellm_llm_api_latency_metric": "Total latency (seconds) for a models LLM API call",
    "litellm_deployment_latency_per_output_token": "LLM Deployment Analytics - Latency per output token",
    "litellm_deployment_state": (
        "LLM Deployment Analytics - The state of the deployment: 0 = healthy, 1 = partial outage, 2 = complete outage"
    ),
    "litellm_remaining_api_key_requests_for_model": (
        "Remaining Requests API Key can make for model (model based rpm limit on key)"
    ),
    "litellm_remaining_api_key_tokens_for_model": (
        "Remaining Tokens API Key can make for model (model based tpm limit on key)"
    ),
}


def families(sim: Simulator, wanted: frozenset[str] | None = None) -> list[Family]:
    gw = sim.gateway
    if gw is None:
        return []
    out = Collector(wanted)
    for (name, labels), value in sorted(gw.counters.items()):
        out.family(name, Kind.COUNTER, HELP[name]).add(labels + SCRAPE, value if "spend" in name else math.floor(value))
    for (name, labels), h in sorted(gw.hists.items(), key=lambda item: item[0]):
        histogram(out.family(name, Kind.HISTOGRAM, HELP[name]), labels + SCRAPE, h.bounds, h.cum, h.total)
    for (name, labels), value in sorted(gw.gauges.items()):
        out.family(name, Kind.GAUGE, HELP[name]).add(labels + SCRAPE, value)
    return out.families()
