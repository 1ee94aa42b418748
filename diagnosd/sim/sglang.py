"""SGLang's /metrics (0.5.14 label sets, started with --enable-metrics) for the simulated SGLang pods.

Scheduler metrics carry L_sched (model_name, engine_type, tp_rank, pp_rank, moe_ep_rank), the
tokenizer's L_tok (model_name, engine_type); buckets are `metrics_collector.py`'s defaults.
SGLang always uses prometheus_client's multiprocess mode: no `_created` series.
"""

from __future__ import annotations

import math

from diagnosd.sim.exposition import Collector, Family, Kind, Labels, colon_free, histogram
from diagnosd.sim.model import Engine, max_num_seqs
from diagnosd.sim.simulator import PodState, Simulator
from diagnosd.sim.vllm import scrape_labels

TOKENIZER_HISTOGRAMS = [
    ("sglang:time_to_first_token_seconds", "ttft", "Histogram of time to first token in seconds."),
    ("sglang:inter_token_latency_seconds", "itl", "Histogram of inter-token latency in seconds."),
    ("sglang:e2e_request_latency_seconds", "e2e", "Histogram of End-to-end request latency in seconds"),
    ("sglang:prompt_tokens_histogram", "prompt", "Histogram of prompt token length."),
    ("sglang:uncached_prompt_tokens_histogram", "computed", "Histogram of uncached (compute) prompt token length."),
    ("sglang:generation_tokens_histogram", "generation", "Histogram of generation token length."),
]


def families(sim: Simulator, wanted: frozenset[str] | None = None) -> list[Family]:
    out = Collector(wanted)
    for state in sim.pods.values():
        if state.pod.deployment.engine == "sglang" and state.engine is not None:
            _pod(out, state, state.engine)
    return out.families()


def _labels(state: PodState) -> tuple[Labels, Labels]:
    model = ("model_name", state.pod.deployment.model_name)
    tok = (model, ("engine_type", "unified"))
    sched = (*tok, ("tp_rank", "0"), ("pp_rank", "0"), ("moe_ep_rank", "0"))
    return sched + scrape_labels(state), tok + scrape_labels(state)


def _pod(out: Collector, state: PodState, engine: Engine) -> None:
    sched, tok = _labels(state)
    underscore = state.pod.deployment.underscore

    def gauge(name: str, help: str, value: float) -> None:
        out.family(colon_free(name, underscore), Kind.GAUGE, help).add(sched, value)

    def counter(name: str, help: str, value: float, labels: Labels) -> None:
        out.family(colon_free(name, underscore), Kind.COUNTER, help).add(labels, math.floor(value))

    k, t, c, cap = state.knobs, engine.tick, engine.counters, state.cap
    used = engine.kv_usage * cap.kv_tokens
    evictable = min(cap.kv_tokens - used, t.hit * t.prompt_mean * 40.0)
    gauge("sglang:num_running_reqs", "The number of running requests.", round(engine.running))
    gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", round(engine.waiting))
    gauge("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0)
    gauge("sglang:num_used_tokens", "The number of used tokens.", round(used))
    gauge("sglang:token_usage", "The token usage.", engine.kv_usage)
    gauge("sglang:full_token_usage", "The token usage for full attention layers.", engine.kv_usage)
    gauge("sglang:kv_used_tokens", "The number of used KV tokens.", round(used))
    gauge("sglang:kv_evictable_tokens", "The number of evictable KV tokens.", round(evictable))
    gauge("sglang:kv_available_tokens", "The number of available KV tokens.", round(cap.kv_tokens - used - evictable))
    gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", cap.kv_tokens)
    gauge("sglang:page_size", "The page size of the KV cache.", 1)
    gauge("sglang:num_pages", "The number of pages in the KV cache.", cap.kv_tokens)
    gauge("sglang:context_len", "Maximum context length.", k.max_model_len)
    gauge("sglang:gen_throughput", "The generation throughput (token/s).", t.served * t.output_mean)
    gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", t.hit)
    gauge("sglang:utilization", "The utilization.", min(1.0, engine.running / max_num_seqs(k, cap)))
    gauge("sglang:new_token_ratio", "The new token ratio.", 0.7 if t.preemptions == 0.0 else 1.0)
    gauge("sglang:num_retracted_reqs", "The number of retracted requests.", round(t.preemptions * 10.0))
    gauge("sglang:num_paused_reqs", "The number of paused requests by async weight sync.", 0)
    gauge("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.", 0.0 if k.enforce_eager else 1.0)
    counter(
        "sglang:num_retracted_requests_total", "Total number of retracted requests.", c.get("preemptions", 0.0), sched
    )
    for mode, value in (
        ("prefill_compute", c.get("computed_tokens", 0.0)),
        ("prefill_cache", c.get("prefix_hits", 0.0)),
        ("decode", c.get("generation_tokens", 0.0)),
    ):
        counter("sglang:realtime_tokens_total", "Total number of tokens processed.", value, (*sched, ("mode", mode)))
    counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", c.get("prompt_tokens", 0.0), tok)
    counter(
        "sglang:generation_tokens_total", "Number of generation tokens processed.", c.get("generation_tokens", 0.0), tok
    )
    if c.get("prefix_hits", 0.0) >= 1.0:
        counter(
            "sglang:cached_tokens_total",
            "Number of cached prompt tokens by source (device/host/storage).",
            c["prefix_hits"],
            (*tok, ("cache_source", "device")),
        )
    finished = sum(v for name, v in c.items() if name.startswith("finished:"))
    counter("sglang:num_requests_total", "Number of requests processed.", finished, tok)
    counter("sglang:num_aborted_requests_total", "Number of requests aborted.", c.get("finished:abort", 0.0), tok)
    counter("sglang:num_so_requests_total", "Number of structured output requests processed.", 0.0, tok)
    if state.pod.deployment.expert_parallel:
        fam = out.family(
            colon_free("sglang:eplb_balancedness", underscore),
            Kind.SUMMARY,
            "Balancedness of MoE in expert parallelism.",
        )
        labels = (*sched, ("forward_mode", "decode"))
        fam.add(labels, math.floor(c.get("forward_passes", 0.0)), "_count")
        fam.add(labels, c.get("forward_balancedness", 0.0), "_sum")
    queue = engine.hists.get("queue")
    if queue is not None:
        fam = out.family(
            colon_free("sglang:queue_time_seconds", underscore),
            Kind.HISTOGRAM,
            "Histogram of queueing time in seconds.",
        )
        histogram(fam, sched, queue.bounds, queue.cum, queue.total)
    for name, key, help in TOKENIZER_HISTOGRAMS:
        h = engine.hists.get(key)
        if h is not None:
            histogram(out.family(colon_free(name, underscore), Kind.HISTOGRAM, help), tok, h.bounds, h.cum, h.total)
