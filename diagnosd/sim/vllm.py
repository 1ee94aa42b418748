"""vLLM's /metrics for the simulated pods: V1 names (0.33, the default) or the V0 engine's (0.8.5).

Names, types, label sets, help strings and buckets follow metrics-engines.md and its inventory
(`vllm/v1/metrics/loggers.py`, `vllm/engine/metrics.py`). Samples also carry the labels a
Kubernetes scrape attaches (namespace, pod, job, instance), since Prometheus stores them so.
"""

from __future__ import annotations

import math

from diagnosd.sim.exposition import Collector, Family, Kind, Labels, colon_free, histogram
from diagnosd.sim.model import REASONS, Engine
from diagnosd.sim.simulator import PodState, Simulator

# (exposed family name, model histogram, help); shared by V1 and V0 unless noted.
HISTOGRAMS = [
    ("vllm:iteration_tokens_total", "iteration", "Histogram of number of tokens per engine_step."),
    ("vllm:request_prompt_tokens", "prompt", "Number of prefill tokens processed."),
    ("vllm:request_generation_tokens", "generation", "Number of generation tokens processed."),
    (
        "vllm:request_max_num_generation_tokens",
        "max_tokens",
        "Histogram of maximum number of requested generation tokens.",
    ),
    ("vllm:request_params_n", "params_n", "Histogram of the n request parameter."),
    ("vllm:request_params_max_tokens", "max_tokens", "Histogram of the max_tokens request parameter."),
    ("vllm:time_to_first_token_seconds", "ttft", "Histogram of time to first token in seconds."),
    ("vllm:e2e_request_latency_seconds", "e2e", "Histogram of e2e request latency in seconds."),
    ("vllm:request_queue_time_seconds", "queue", "Histogram of time spent in WAITING phase for request."),
    ("vllm:request_inference_time_seconds", "inference", "Histogram of time spent in RUNNING phase for request."),
    ("vllm:request_prefill_time_seconds", "prefill", "Histogram of time spent in PREFILL phase for request."),
    ("vllm:request_decode_time_seconds", "decode", "Histogram of time spent in DECODE phase for request."),
]
V1_HISTOGRAMS = [
    ("vllm:inter_token_latency_seconds", "itl", "Histogram of inter-token latency in seconds."),
    (
        "vllm:request_time_per_output_token_seconds",
        "tpot",
        "Histogram of time_per_output_token_seconds per request.",
    ),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "computed",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
    ),
    ("vllm:request_num_preemptions", "preempted", "Histogram of the number of times a request was preempted."),
]
V0_HISTOGRAMS = [
    ("vllm:time_per_output_token_seconds", "itl", "Histogram of time per output token in seconds."),
    (
        "vllm:time_in_queue_requests",
        "queue",
        (
            "Histogram of time the request spent in the queue in seconds. DEPRECATED: use "
            "vllm:request_queue_time_seconds instead."
        ),
    ),
]
_labels: dict[tuple[str, str, int], Labels] = {}


def families(sim: Simulator, wanted: frozenset[str] | None = None) -> list[Family]:
    out = Collector(wanted)
    for state in sim.pods.values():
        d = state.pod.deployment
        if d.engine != "vllm" or state.engine is None:
            continue
        if d.names == "v0":
            _v0(out, state, state.engine, sim.time)
        else:
            _v1(out, state, state.engine, sim.time)
    return out.families()


def scrape_labels(state: PodState) -> Labels:
    """What a ServiceMonitor scrape adds: instance, job, namespace, pod (and `track` when set)."""
    pod = state.pod
    track = (("track", pod.deployment.track),) if pod.deployment.track else ()
    return (
        ("instance", f"{pod.ip}:8000"),
        ("job", pod.deployment.name),
        ("namespace", pod.namespace),
        ("pod", state.name),
        *track,
    )


def _base(state: PodState, v1: bool) -> Labels:
    key = (state.pod.key, state.name, int(v1))
    found = _labels.get(key)
    if found is None:
        own = (
            (("engine", "0"), ("model_name", state.pod.deployment.model_name))
            if v1
            else (("model_name", state.pod.deployment.model_name),)
        )
        found = _labels[key] = own + scrape_labels(state)
    return found


class _Out:
    """Adds one pod's samples, naming families as its engine exposes them (colons or underscores)."""

    def __init__(self, out: Collector, state: PodState, base: Labels) -> None:
        self.out, self.base = out, base
        self.underscore = state.pod.deployment.underscore

    def name(self, name: str) -> str:
        return colon_free(name, self.underscore)

    def gauge(self, name: str, help: str, value: float, extra: Labels = ()) -> None:
        self.out.family(self.name(name), Kind.GAUGE, help).add(self.base + extra, value)

    def counter(self, name: str, help: str, value: float, extra: Labels = ()) -> None:
        self.out.family(self.name(name), Kind.COUNTER, help).add(self.base + extra, math.floor(value))

    def histograms(self, engine: Engine, table: list[tuple[str, str, str]]) -> None:
        for name, kind, help in table:
            h = engine.hists.get(kind)
            if h is not None:
                histogram(self.out.family(self.name(name), Kind.HISTOGRAM, help), self.base, h.bounds, h.cum, h.total)


def _v1(out: Collector, state: PodState, engine: Engine, now: float) -> None:
    o = _Out(out, state, _base(state, True))
    c = engine.counters
    o.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", round(engine.running))
    # Requests whose KV is still being pulled (PD decode side) wait too, deferred by the KV transfer.
    fetching = float(round(engine.kv_in_flight))
    o.gauge(
        "vllm:num_requests_waiting", "Number of requests waiting to be processed.", round(engine.waiting) + fetching
    )
    for reason, waiting in (("capacity", float(round(engine.waiting))), ("deferred", fetching)):
        o.gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
            "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). "
            "Sum of all reasons equals vllm:num_requests_waiting.",
            waiting,
            (("reason", reason),),
        )
    o.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engine.kv_usage)
    for sleep, state_value in (("awake", 1.0), ("weights_offloaded", 0.0), ("discard_all", 0.0)):
        o.gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
            "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            state_value,
            (("sleep_state", sleep),),
        )
    o.counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        c.get("prefix_queries", 0.0),
    )
    o.counter(
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        c.get("prefix_hits", 0.0),
    )
    o.counter(
        "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", c.get("preemptions", 0.0)
    )
    o.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", c.get("prompt_tokens", 0.0))
    o.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", c.get("generation_tokens", 0.0))
    cached = c.get("prefix_hits", 0.0)
    consumer = state.pod.deployment.kv_consumer
    computed = c.get("computed_tokens", 0.0)
    for source, value in (
        ("local_compute", 0.0 if consumer else computed),
        ("local_cache_hit", cached),
        ("external_kv_transfer", computed if consumer else 0.0),
    ):
        o.counter(
            "vllm:prompt_tokens_by_source_total", "Number of prompt tokens by source.", value, (("source", source),)
        )
    o.counter("vllm:prompt_tokens_cached_total", "Number of cached prompt tokens (local + external).", cached)
    for reason in REASONS:
        # Every reason is pre-created at 0; an abort is never counted (OutputProcessor.abort_requests
        # does not reach the finished-request stats, vLLM issue 31503), so "abort" stays 0.
        o.counter(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            0.0 if reason == "abort" else c.get(f"finished:{reason}", 0.0),
            (("finished_reason", reason),),
        )
    o.histograms(engine, HISTOGRAMS + V1_HISTOGRAMS)
    if consumer:
        _kv_consumer(o, engine)
    _config(out, state, o, now, v1=True)
    _process(out, state)


def _kv_consumer(o: _Out, engine: Engine) -> None:
    """The decode side of PD: KV pulls by stage and the NIXL transfer time (see pd.py)."""
    for stage, value in (
        ("waiting_to_start", 0.0),
        ("in_progress", float(round(engine.kv_in_flight))),  # the `deferred` waiting requests
        ("completed_waiting", float(round(engine.waiting))),
    ):
        o.gauge(
            "vllm:num_requests_kv_fetch_by_stage",
            "Number of waiting requests by async KV load stage. Stage labels: 'waiting_to_start' = needs an async "
            "KV load that has not started; 'in_progress' = load started and not yet reported finished; "
            "'completed_waiting' = load finished, request not running yet.",
            value,
            (("stage", stage),),
        )
    o.histograms(
        engine, [("vllm:nixl_xfer_time_seconds", "xfer", "Histogram of transfer duration for NIXL KV Cache transfers.")]
    )


def _v0(out: Collector, state: PodState, engine: Engine, now: float) -> None:
    o = _Out(out, state, _base(state, False))
    c = engine.counters
    o.gauge("vllm:num_requests_running", "Number of requests currently running on GPU.", round(engine.running))
    o.gauge(
        "vllm:num_requests_swapped",
        "Number of requests swapped to CPU. DEPRECATED: KV cache offloading is not used in V1",
        0,
    )
    o.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", round(engine.waiting))
    o.gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", engine.kv_usage)
    o.gauge(
        "vllm:cpu_cache_usage_perc",
        "CPU KV-cache usage. 1 means 100 percent usage. DEPRECATED: KV cache offloading is not used in V1",
        0.0,
    )
    o.gauge(
        "vllm:cpu_prefix_cache_hit_rate",
        "CPU prefix cache block hit rate. DEPRECATED: KV cache offloading is not used in V1",
        -1.0,
    )
    o.gauge(
        "vllm:gpu_prefix_cache_hit_rate",
        (
            "GPU prefix cache block hit rate. DEPRECATED: use vllm:gpu_prefix_cache_queries and "
            "vllm:gpu_prefix_cache_queries in V1"
        ),
        engine.tick.hit if state.knobs.prefix_caching else -1.0,
    )
    o.counter(
        "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", c.get("preemptions", 0.0)
    )
    o.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", c.get("prompt_tokens", 0.0))
    o.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", c.get("generation_tokens", 0.0))
    # V0 creates a reason's series at its first count and never counts an abort (the scheduler
    # drops an aborted group before the stats see it): stop and length only.
    for reason in REASONS[:2]:
        o.counter(
            "vllm:request_success_total",
            "Count of successfully processed requests.",
            c.get(f"finished:{reason}", 0.0),
            (("finished_reason", reason),),
        )
    o.histograms(engine, HISTOGRAMS + V0_HISTOGRAMS)
    _config(out, state, o, now, v1=False)
    _process(out, state)


def _config(out: Collector, state: PodState, o: _Out, now: float, *, v1: bool) -> None:
    """vllm:cache_config_info: CacheConfig as string labels, no model_name (engine label from 0.9)."""
    k, cap = state.knobs, state.cap
    fields: dict[str, str] = {
        "block_size": str(k.block_size),
        "cache_dtype": k.kv_cache_dtype,
        "enable_prefix_caching": str(k.prefix_caching),
        "gpu_memory_utilization": str(k.gpu_memory_utilization),
        "is_attention_free": "False",
        "num_cpu_blocks": "0",
        "num_gpu_blocks": str(cap.num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256" if v1 else "builtin",
        "sliding_window": "None",
    }
    if v1:
        fields |= {
            "kv_cache_size_tokens": str(int(cap.kv_tokens)),
            "kv_cache_max_concurrency": str(round(cap.kv_tokens / k.max_model_len, 2)),
            "kv_cache_memory_bytes": "None",
            "kv_offloading_backend": "native",
            "kv_offloading_size": "None",
            "kv_sharing_fast_prefill": "False",
            "engine": "0",
        }
    else:
        fields |= {
            "calculate_kv_scales": "False",
            "cpu_offload_gb": "0",
            "swap_space": "4",
            "swap_space_bytes": "4294967296",
        }
    labels = tuple(sorted(fields.items())) + scrape_labels(state)
    out.family(o.name("vllm:cache_config_info"), Kind.GAUGE, "Information of the LLMEngine CacheConfig").add(
        labels, 1.0
    )
    if k.lora_adapters:
        adapters = k.lora_adapters
        running = adapters if k.lora_traffic_share > 0 else ""
        lora = (
            ("max_lora", str(len(adapters.split(",")))),
            ("running_lora_adapters", running),
            ("waiting_lora_adapters", ""),
        )
        out.family(o.name("vllm:lora_requests_info"), Kind.GAUGE, "Running stats on lora requests.").add(
            lora + scrape_labels(state), float(math.floor(now))
        )


def _process(out: Collector, state: PodState) -> None:
    """prometheus_client's process collector of the API server (single-process mode, the default)."""
    labels = scrape_labels(state)
    out.family("process_cpu_seconds_total", Kind.COUNTER, "Total user and system CPU time spent in seconds.").add(
        labels, state.cpu_seconds
    )
    out.family("process_start_time_seconds", Kind.GAUGE, "Start time of the process since unix epoch in seconds.").add(
        labels, state.container_started
    )
