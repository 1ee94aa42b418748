"""Review cases for the `explains:` declarations and the changed queries, on a real Prometheus.

Each case is a series test in the format of rules/<id>.test.yaml, run by the same runner against
a copy of the shipped trees (only these cases, one TSDB, one Prometheus). Most cases describe an
incident in which a declaration (or a query) once gave the wrong answer ("formerly ..."), and pin
the fixed answer; the rest pin the intended chains.

Layout (engine trees): baseline samples at minutes 0-40, current samples 1d-9m .. 1d30m, evaluated
at 1d30m: a 10m window now and the same window 1d earlier. Counters are written per minute.
"""

from __future__ import annotations

import json
import shutil
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from diagnosd.engine.walk import rank
from diagnosd.findings.model import Evidence, RootCause
from diagnosd.promlocal.openmetrics import Series
from diagnosd.rulestest.runner import CaseResult, collect
from diagnosd.trees import load_rules, walk
from diagnosd.trees.model import Conclusion, Severity, Text, Tree
from diagnosd.trees.semantics import check_tree
from tests.conftest import RULES, StartPrometheus

NS = "prod"
MODEL = "llama-3-8b"
EVAL = "1d30m"
# EVAL as a Unix time: the series runner's first sample lies at 2026-01-01T00:00:00Z.
EVAL_EPOCH = int(datetime(2026, 1, 2, 0, 30, tzinfo=UTC).timestamp())


def num(x: float) -> str:
    """A number in the expanding notation (no exponent)."""
    return f"{x:.6f}".rstrip("0").rstrip(".")


def counter(base: float, now: float) -> str:
    """Per-minute increments at the baseline and now."""
    return f"0+{num(base)}x40 _x1390 1000000+{num(now)}x39"


def gauge(base: float, now: float) -> str:
    return f"{num(base)}x40 _x1390 {num(now)}x39"


def vllm(name: str, pod: str, **labels: str) -> str:
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return f'vllm:{name}{{namespace="{NS}",pod="{pod}",model_name="{MODEL}",engine="0"{extra}}}'


def dcgm(name: str, pod: str) -> str:
    return (
        f'{name}{{namespace="{NS}",pod="{pod}",container="engine",gpu="0",UUID="GPU-{pod}-0",'
        f'device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="node-a"}}'
    )


def s(series: str, values: str) -> dict[str, str]:
    return {"series": series, "values": values}


def target(pod: str) -> dict[str, str]:
    return {"namespace": NS, "pod": pod}


# ---------------------------------------------------------------------------------------------
# ttft_high


def ttft_pod(
    pod: str,
    *,
    req: tuple[float, float] = (60, 60),
    prompt: tuple[float, float] = (1000, 1000),
    hit: tuple[float, float] = (0.6, 0.6),
    waiting: tuple[float, float] = (0, 0),
    step_tokens: tuple[float, float] = (500, 500),
    gpu: tuple[float, float] = (50, 50),
    computed: tuple[float, float] | None = None,
    slow: bool = True,
    buckets: dict[str, tuple[float, float]] | None = None,
    started: float | None = None,
) -> list[dict[str, str]]:
    """One vLLM V1 pod of the ttft_high tree. TTFT p95 goes from < 0.1 s to ~2.4 s when `slow`.
    All prompts are below 5000 tokens (long_prompt_blocking stays clear). `started`: the API
    server's process_start_time_seconds now, in seconds before EVAL (prometheus_client's process
    collector, scraped with the pod's labels); a process started after the baseline window shows
    an older one (10 days before EVAL) there. None: no start-time metric at all."""
    (rb, rn), (pb, pn), (hb, hn) = req, prompt, hit
    tokens = (rb * pb, rn * pn)
    out = [
        s(vllm("time_to_first_token_seconds_bucket", pod, le="0.1"), counter(60, 0 if slow else 60)),
        s(vllm("time_to_first_token_seconds_bucket", pod, le="0.5"), counter(60, 0 if slow else 60)),
        s(vllm("time_to_first_token_seconds_bucket", pod, le="2.5"), counter(60, 60)),
        s(vllm("time_to_first_token_seconds_bucket", pod, le="+Inf"), counter(60, 60)),
        s(vllm("request_success_total", pod, finished_reason="stop"), counter(rb, rn)),
        s(vllm("request_prompt_tokens_sum", pod), counter(*tokens)),
        s(vllm("request_prompt_tokens_count", pod), counter(rb, rn)),
        s(vllm("prompt_tokens_total", pod), counter(*tokens)),
        s(vllm("prefix_cache_hits_total", pod), counter(tokens[0] * hb, tokens[1] * hn)),
        s(vllm("prefix_cache_queries_total", pod), counter(*tokens)),
        s(vllm("num_requests_waiting", pod), gauge(*waiting)),
        s(vllm("iteration_tokens_total_sum", pod), counter(1200 * step_tokens[0], 1200 * step_tokens[1])),
        s(vllm("iteration_tokens_total_count", pod), counter(1200, 1200)),
        s(dcgm("DCGM_FI_DEV_GPU_UTIL", pod), gauge(*gpu)),
        s(
            f'vllm:cache_config_info{{namespace="{NS}",pod="{pod}",engine="0",block_size="16",'
            f'cache_dtype="auto",gpu_memory_utilization="0.9",enable_prefix_caching="True"}}',
            gauge(1, 1),
        ),
    ]
    layout = buckets or {le: (rb, rn) for le in ("5000", "20000", "50000", "100000", "+Inf")}
    for le, (b, n) in layout.items():
        out.append(s(vllm("request_prompt_tokens_bucket", pod, le=le), counter(b, n)))
    if computed is not None:
        out.append(s(vllm("prompt_tokens_by_source_total", pod, source="local_compute"), counter(*computed)))
    if started is not None:
        out.append(
            s(
                f'process_start_time_seconds{{namespace="{NS}",pod="{pod}",job="vllm",instance="10.0.0.1:8000"}}',
                gauge(EVAL_EPOCH - (started if started > 86400 + 1800 else 10 * 86400), EVAL_EPOCH - started),
            )
        )
    return out


TTFT: list[dict[str, Any]] = [
    {
        # A 32K-context model (max_model_len 32768: vLLM's last finite prompt bucket is 20000).
        # 5% of prompts are now ~30K tokens and land in +Inf, so the p99 reads 20000 and the check
        # (p99 > 32000) reads clear, although the true p99 lies anywhere in 20000-32768. A quantile
        # at the top bucket is a lower bound: below a threshold above that bound it cannot rule
        # the branch out (unknown; the top_bucket context only changes how it is printed).
        "name": "ttft_32k_context_p99_at_top_bucket_is_not_clear",
        "eval_time": EVAL,
        "input_series": ttft_pod(
            "vllm-0",
            prompt=(1000, 2450),
            buckets={"5000": (60, 57), "20000": (60, 57), "+Inf": (60, 60)},
        ),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "checks": {"long_prompt_blocking": "unknown"},
            }
        ],
    },
    {
        # A new caller brings 4x the requests with prompts a bit longer (x1.35): the pod finishes
        # 4x the requests a second, the queue grows and the GPU saturates with x5.4 the prefill.
        # The causal reading: more traffic is the root cause (scale out / rate-limit), and the
        # queue and the extra prefill are its consequences (traffic x4 x1.5 slack covers prefill
        # x5.4); the prompts stay a root cause of their own. Formerly queueing itself was the root
        # cause, with nothing saying what made the queue.
        "name": "ttft_traffic_x4_with_prompts_x1_35_traffic_growth_explains_the_queue",
        "eval_time": EVAL,
        "input_series": ttft_pod(
            "vllm-0", req=(60, 240), prompt=(1000, 1350), waiting=(0, 40), step_tokens=(500, 600), gpu=(50, 97)
        ),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "top_cause": "traffic_growth",
                "causes": ["traffic_growth", "prompt_inflation"],
                "absent_causes": ["queueing", "gpu_compute_contention"],
                "explained": {"queueing": ["traffic_growth"], "gpu_compute_contention": ["traffic_growth"]},
            }
        ],
    },
    {
        # --max-num-batched-tokens raised 2048 -> 16384 in a restart 30 minutes ago: steps x8
        # while prompts grew x1.35. The restart is the only trace of the new flags (no engine
        # exports them): step_limits_changed is a root cause and the bigger steps its consequence.
        "name": "ttft_steps_x8_with_prompts_x1_35_after_a_restart_step_limits_changed_is_a_root_cause",
        "eval_time": EVAL,
        "input_series": ttft_pod("vllm-0", prompt=(1000, 1350), step_tokens=(500, 4000), started=1800),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "causes": ["step_limits_changed", "prompt_inflation"],
                "absent_causes": ["batch_too_large"],
                "explained": {"batch_too_large": ["step_limits_changed"]},
                "checks": {"step_limits_changed": "matched"},
            }
        ],
    },
    {
        # The same data with the engine running since before the baseline: its step limits are
        # the baseline's, so steps carry more tokens only because more prefill waits for them:
        # batch_too_large is a consequence of the prompts, not a root cause.
        "name": "ttft_steps_x8_with_prompts_x1_35_no_restart_batch_too_large_is_explained_by_the_prompts",
        "eval_time": EVAL,
        "input_series": ttft_pod("vllm-0", prompt=(1000, 1350), step_tokens=(500, 4000), started=10 * 86400),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "top_cause": "prompt_inflation",
                "absent_causes": ["batch_too_large", "step_limits_changed"],
                "explained": {"batch_too_large": ["prompt_inflation"]},
                "checks": {"step_limits_changed": "clear"},
            }
        ],
    },
    {
        # The seed's "other prefill work takes the GPU": a new caller with 5x the requests and no
        # shared prefix. The token-weighted hit ratio falls 0.6 -> 0.1 only because the mix
        # changed (the old traffic still hits). Computed prefill x13.5; misses alone (the same
        # traffic at a 0.1 hit ratio) would be x2.25. Formerly prefix_cache_hit_drop explained
        # gpu_compute_contention with no size check, and system_prompt_dynamic explained the hit
        # drop: the one root cause shown was "the system prompt gained dynamic fields". The hit
        # drop now sizes the prefill growth by the growth of its misses (x2.25 here).
        "name": "ttft_new_prefill_flood_without_shared_prefix_contention_stays_a_root_cause",
        "eval_time": EVAL,
        "input_series": ttft_pod("vllm-0", req=(60, 360), hit=(0.6, 0.1), gpu=(50, 97), computed=(24000, 324000)),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "causes": ["gpu_compute_contention"],
            }
        ],
    },
    {
        # Pins the intended chain: same traffic, hit ratio 0.9 -> 0.5, computed prefill x5 (all
        # of it the misses), GPU saturated: contention is the hit drop's consequence.
        "name": "ttft_pure_hit_drop_explains_computed_prefill_growth",
        "eval_time": EVAL,
        "input_series": ttft_pod("vllm-0", hit=(0.9, 0.5), gpu=(50, 97), computed=(6000, 30000)),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "absent_causes": ["gpu_compute_contention"],
                "explained": {"gpu_compute_contention": ["prefix_cache_hit_drop"]},
            }
        ],
    },
    {
        # Pins the brief's case: prompts x3, prefill x3, steps x2, GPU saturated: one root cause.
        "name": "ttft_prompts_x3_explain_prefill_and_steps",
        "eval_time": EVAL,
        "input_series": ttft_pod("vllm-0", prompt=(1000, 3000), step_tokens=(500, 1000), gpu=(50, 97), hit=(0.3, 0.3)),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "top_cause": "prompt_inflation",
                "absent_causes": ["gpu_compute_contention", "batch_too_large"],
                "explained": {
                    "gpu_compute_contention": ["prompt_inflation"],
                    "batch_too_large": ["prompt_inflation"],
                },
            }
        ],
    },
    {
        # The slack bound at work: prompts x1.4 cannot account for prefill x10 (> 1.4 * 1.5).
        "name": "ttft_prompts_x1_4_do_not_explain_prefill_x10",
        "eval_time": EVAL,
        "input_series": ttft_pod("vllm-0", req=(60, 430), prompt=(1000, 1400), gpu=(50, 97)),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "causes": ["prompt_inflation", "gpu_compute_contention"],
            }
        ],
    },
]


# ---------------------------------------------------------------------------------------------
# queue_backlog


def queue_pod(
    pod: str,
    *,
    waiting: float,
    running: tuple[float, float],
    kv: tuple[float, float] = (0.5, 0.5),
    buckets: dict[str, tuple[float, float]],
) -> list[dict[str, str]]:
    out = [
        s(vllm("num_requests_waiting", pod), gauge(0, waiting)),
        s(vllm("num_requests_running", pod), gauge(*running)),
        s(vllm("kv_cache_usage_perc", pod), gauge(*kv)),
        s(vllm("request_success_total", pod, finished_reason="stop"), counter(300, 300)),
        s(vllm("generation_tokens_total", pod), counter(90000, 90000)),
    ]
    out += [s(vllm("request_prompt_tokens_bucket", pod, le=le), counter(*v)) for le, v in buckets.items()]
    return out


# 128K context (vLLM 1-2-5 buckets up to 100000): 5% of prompts above 100K, the rest below 5K.
LONG_TAIL_128K: dict[str, tuple[float, float]] = {
    "5000": (285, 285),
    "20000": (285, 285),
    "50000": (285, 285),
    "100000": (285, 285),
    "+Inf": (300, 300),
}

QUEUE: list[dict[str, Any]] = [
    {
        # A RAG fleet that always had 5% of 128K prompts (yesterday too). Now traffic fills
        # all slots: 250 of 256 running. long_requests_hogging is an absolute check, so it
        # matches on this standing tail and explains concurrency_slots_full away; a running count
        # at max-num-seqs is many requests, not a few long ones (long prompts exhaust KV blocks
        # and cause preemption, which lowers the running count). The capacity cause must stay.
        "name": "queue_standing_long_tail_does_not_hide_full_slots",
        "eval_time": EVAL,
        "input_series": queue_pod("vllm-0", waiting=30, running=(100, 250), buckets=LONG_TAIL_128K),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "causes": ["concurrency_slots_full"],
            }
        ],
    },
    {
        # A 64K-context model: vLLM buckets stop at 50000, so 5% of 60K prompts land in +Inf and
        # the p99 reads 50000; p99 - median is then below 50000 whatever the prompts: the check
        # cannot match on any model with max_model_len below ~100K.
        "name": "queue_64k_context_long_prompts_can_match",
        "eval_time": EVAL,
        "input_series": queue_pod(
            "vllm-0",
            waiting=25,
            running=(50, 50),
            buckets={"5000": (300, 285), "20000": (300, 285), "50000": (300, 285), "+Inf": (300, 300)},
        ),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "top_cause": "long_requests_hogging",
                "checks": {"long_requests_hogging": "matched"},
            }
        ],
    },
    {
        # Pins the intent of p99 - median: every prompt is 128K (a long-document workload):
        # nothing is abnormally long, the check is clear (not unknown, not matched).
        "name": "queue_all_prompts_long_is_not_abnormal",
        "eval_time": EVAL,
        "input_series": queue_pod(
            "vllm-0",
            waiting=25,
            running=(50, 50),
            kv=(0.95, 0.95),
            buckets={"5000": (0, 0), "20000": (0, 0), "50000": (0, 0), "100000": (0, 0), "+Inf": (300, 300)},
        ),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "top_cause": "kv_pool_full",
                "absent_causes": ["long_requests_hogging"],
                "checks": {"long_requests_hogging": "clear"},
            }
        ],
    },
    {
        # Pins: a new long tail (none yesterday) holding the KV pool: the pool is its consequence.
        "name": "queue_new_long_tail_explains_a_full_kv_pool",
        "eval_time": EVAL,
        "input_series": queue_pod(
            "vllm-0",
            waiting=25,
            running=(50, 40),
            kv=(0.5, 0.97),
            buckets={k: (300, v[1]) for k, v in LONG_TAIL_128K.items()},
        ),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "top_cause": "long_requests_hogging",
                "explained": {"kv_pool_full": ["long_requests_hogging"]},
            }
        ],
    },
]


SHORT_PROMPTS: dict[str, tuple[float, float]] = {le: (300, 300) for le in ("5000", "20000", "100000", "+Inf")}


def hpa(name: str, desired: float, current: float, maximum: float) -> list[dict[str, str]]:
    labels = f'namespace="{NS}",horizontalpodautoscaler="{name}"'
    return [
        s(f"kube_horizontalpodautoscaler_status_desired_replicas{{{labels}}}", gauge(2, desired)),
        s(f"kube_horizontalpodautoscaler_status_current_replicas{{{labels}}}", gauge(2, current)),
        s(f"kube_horizontalpodautoscaler_spec_max_replicas{{{labels}}}", gauge(maximum, maximum)),
    ]


QUEUE.append(
    {
        # Deployment vllm-a sits at maxReplicas (4 of 4). One pod's KV pool is 97% full with 30
        # waiting (sticky sessions pin long conversations to it); its sibling is at 30% KV with
        # nothing waiting. autoscaling_lagging is a Deployment-level fact given to every pod, and
        # it explains this pod's full pool away, though the capacity to absorb it is idle next door.
        "name": "queue_hpa_at_max_does_not_explain_one_hot_pods_kv_pool",
        "eval_time": EVAL,
        "input_series": queue_pod(
            "vllm-a-7d9f8c6b5-x2x4z", waiting=30, running=(100, 120), kv=(0.5, 0.97), buckets=SHORT_PROMPTS
        )
        + queue_pod("vllm-a-7d9f8c6b5-k3j5m", waiting=0, running=(100, 40), kv=(0.5, 0.3), buckets=SHORT_PROMPTS)
        + hpa("vllm-a", desired=4, current=4, maximum=4),
        "expect": [
            {
                "target": target("vllm-a-7d9f8c6b5-x2x4z"),
                "symptom_present": True,
                "causes": ["kv_pool_full"],
            },
            {"target": target("vllm-a-7d9f8c6b5-k3j5m"), "symptom_present": False, "no_cause": True},
        ],
    }
)


# ---------------------------------------------------------------------------------------------
# kv_hit_low


def hit_pod(
    pod: str, *, hit: tuple[float, float], running: tuple[float, float], kv: tuple[float, float]
) -> list[dict[str, str]]:
    return [
        s(vllm("request_success_total", pod, finished_reason="stop"), counter(120, 120)),
        s(vllm("prompt_tokens_total", pod), counter(120000, 120000)),
        s(vllm("prefix_cache_hits_total", pod), counter(120000 * hit[0], 120000 * hit[1])),
        s(vllm("prefix_cache_queries_total", pod), counter(120000, 120000)),
        s(vllm("kv_cache_usage_perc", pod), gauge(*kv)),
        s(vllm("num_requests_running", pod), gauge(*running)),
        s(
            f'vllm:cache_config_info{{namespace="{NS}",pod="{pod}",engine="0",block_size="16",'
            f'gpu_memory_utilization="0.9",enable_prefix_caching="True"}}',
            gauge(1, 1),
        ),
    ]


KV_HIT: list[dict[str, Any]] = [
    {
        # A timestamp enters the system prompt: hits 70% -> 5%. Prefills get longer, requests stay
        # longer, running x2.25 and KV fills with uncacheable blocks: radix_eviction matches as a
        # side effect and, with no size check, explains the prompt change away. Eviction cannot
        # take a prefix shared by running requests (their blocks are in use), so it cannot bring
        # a common system prompt's hits near 0.
        "name": "kv_hit_collapse_under_load_keeps_dynamic_system_prompt",
        "eval_time": EVAL,
        "input_series": hit_pod("vllm-0", hit=(0.7, 0.05), running=(40, 90), kv=(0.6, 0.95)),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "causes": ["dynamic_system_prompt"],
            }
        ],
    },
]


# ---------------------------------------------------------------------------------------------
# memory_high_qps_low


def mem_pod(pod: str, *, kv: float, running_adapters: str) -> list[dict[str, str]]:
    info = (
        f'vllm:lora_requests_info{{namespace="{NS}",pod="{pod}",max_lora="4",'
        f'running_lora_adapters="{running_adapters}",waiting_lora_adapters=""}}'
    )
    return [
        s(vllm("request_success_total", pod, finished_reason="stop"), counter(18, 18)),
        s(vllm("kv_cache_usage_perc", pod), gauge(kv, kv)),
        s(
            f'vllm:cache_config_info{{namespace="{NS}",pod="{pod}",engine="0",block_size="16",'
            f'enable_prefix_caching="True",gpu_memory_utilization="0.92"}}',
            gauge(1, 1),
        ),
        s(info, "1767223800x40 _x1390 1767310200x39"),
        s(dcgm("DCGM_FI_DEV_GPU_UTIL", pod), gauge(20, 20)),
        s(dcgm("DCGM_FI_DEV_FB_USED", pod), gauge(74000, 74000)),
        s(dcgm("DCGM_FI_DEV_FB_FREE", pod), gauge(6000, 6000)),
    ]


MEMORY: list[dict[str, Any]] = [
    {
        # --enable-lora with no adapter in use, KV pool 95% held by running requests. vLLM
        # preallocates max_loras adapter slots at startup, before the KV pool is sized: unloading
        # an idle adapter frees no KV block. The full pool is not the adapters' doing.
        "name": "memory_idle_lora_does_not_explain_a_full_kv_pool",
        "eval_time": EVAL,
        "input_series": mem_pod("vllm-0", kv=0.95, running_adapters=""),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "causes": ["kv_pool_full"],
            }
        ],
    },
]


# ---------------------------------------------------------------------------------------------
# nccl_failure (layout of rules/nccl_failure.test.yaml: baseline 0-10m, now 1d-1d10m)


def nccl_case(state: str, physical: str, downed: str, symbols: str) -> list[dict[str, str]]:
    gpu = (
        'gpu="{i}",UUID="GPU-gpu-1-{i}",device="nvidia{i}",modelName="NVIDIA H100 80GB HBM3",'
        'Hostname="gpu-1",namespace="prod",pod="llama-tp",container="vllm"'
    )
    ib = 'node="gpu-1",instance="gpu-1:9100",device="mlx5_0",port="1"'
    out = [
        s(
            'vllm:generation_tokens_total{namespace="prod",pod="llama-tp",model_name="llama-tp",engine="0"}',
            "0+6000x10 _x1429 2920000+2000x10",
        ),
        # The detect reads tokens/s per running request: the same 10 requests decode a third as fast.
        s(
            'vllm:num_requests_running{namespace="prod",pod="llama-tp",model_name="llama-tp",engine="0"}',
            "10x10 _x1429 10x10",
        ),
        s(
            'kube_pod_container_resource_requests{namespace="prod",pod="llama-tp",uid="u-llama-tp",container="vllm",'
            'node="gpu-1",resource="nvidia_com_gpu",unit="integer"}',
            "_x1440 2x10",
        ),
        s(f"node_infiniband_state_id{{{ib}}}", state),
        s(f"node_infiniband_physical_state_id{{{ib}}}", physical),
        s(f"node_infiniband_link_downed_total{{{ib}}}", downed),
        s(f"node_infiniband_symbol_error_total{{{ib}}}", symbols),
        s(f"node_infiniband_port_errors_received_total{{{ib}}}", "_x1440 2+0x10"),
        s(f"node_infiniband_local_link_integrity_errors_total{{{ib}}}", "_x1440 0+0x10"),
        s(f"node_infiniband_link_error_recovery_total{{{ib}}}", "_x1440 1+0x10"),
    ]
    for i in (0, 1):
        out.append(s(f"DCGM_FI_DEV_GPU_UTIL{{{gpu.format(i=i)}}}", "90x10 _x1429 90x10"))
        out.append(s(f"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{gpu.format(i=i)}}}", "_x1440 5000x10"))
    return out


NCCL: list[dict[str, Any]] = [
    {
        # The port leaves ACTIVE (state INIT: the subnet manager no longer configures it) while the
        # physical link stays LinkUp; a handful of symbol errors were counted meanwhile (the
        # threshold is 0). CRC errors do not put a port in INIT. Formerly switch_crc_errors (warning)
        # explains the critical ib_link_down away and becomes the only root cause.
        "name": "nccl_port_init_with_a_few_symbol_errors_keeps_ib_link_down",
        "eval_time": "1d10m",
        "input_series": nccl_case(
            state="_x1440 4x7 2x3", physical="_x1440 5x10", downed="_x1440 3+0x10", symbols="_x1440 10+0x7 12+0x2"
        ),
        "expect": [
            {
                "target": {"namespace": "prod", "pod": "llama-tp"},
                "symptom_present": True,
                "top_cause": "ib_link_down",
            }
        ],
    },
    {
        # A link flap (down, retrained) counts symbol errors while it retrains: the errors are
        # the flap's trace, not necessarily its cause; the critical link-down must stay a root.
        "name": "nccl_link_flap_with_retrain_errors_keeps_ib_link_down",
        "eval_time": "1d10m",
        "input_series": nccl_case(
            state="_x1440 4x7 1x3", physical="_x1440 5x7 3x3", downed="_x1440 3x7 4x3", symbols="_x1440 10+0x7 14+0x2"
        ),
        "expect": [
            {
                "target": {"namespace": "prod", "pod": "llama-tp"},
                "symptom_present": True,
                "causes": ["ib_link_down"],
            }
        ],
    },
]


# ---------------------------------------------------------------------------------------------
# cost_increase (layout of rules/cost_increase.test.yaml: baseline 0-10m, now 1d-1d10m)


def cost_model(model: str, group: str, mid: str, *, calls: tuple[float, float], price: float) -> list[dict[str, str]]:
    def c(base: float, now: float) -> str:
        return f"0+{num(base)}x10 _x1429 100000+{num(now)}x10"

    b, n = calls
    tokens = {"input": 500, "output": 200}
    out = [
        s(
            f'litellm_spend_metric_total{{model="{model}",team="team-a",hashed_api_key="k-{mid}",model_id="{mid}"}}',
            c(b * price, n * price),
        ),
        s(
            f'litellm_deployment_success_responses_total{{requested_model="{group}",litellm_model_name="{model}",model_id="{mid}"}}',
            c(b, n),
        ),
        s(
            f'litellm_deployment_total_requests_total{{requested_model="{group}",litellm_model_name="{model}",model_id="{mid}"}}',
            c(b, n),
        ),
    ]
    for kind, per in tokens.items():
        out.append(
            s(
                f'litellm_{kind}_tokens_metric_total{{model="{model}",requested_model="{group}",model_id="{mid}"}}',
                c(b * per, n * per),
            )
        )
    out.append(
        s(
            f'litellm_total_tokens_metric_total{{model="{model}",requested_model="{group}",model_id="{mid}"}}',
            c(b * 700, n * 700),
        )
    )
    return out


COST: list[dict[str, Any]] = [
    {
        # A business burst on the expensive model: its calls x4, the cheap model's calls unchanged
        # (nothing moved away from it: the total rose by exactly the extra calls). The pricier
        # model's share of calls rises as a side effect, so expensive_model_routing matches and,
        # with no condition, explains request_rate_growth away: the report says "a routing change
        # sent traffic to a pricier model" where the seed's branch is "RPM up -> abuse or burst ->
        # audit log".
        "name": "cost_burst_on_the_pricey_model_keeps_request_rate_growth",
        "eval_time": "1d10m",
        "params": {"window": "10m", "idle_window": "10m"},
        "input_series": cost_model("openai/gpt-4o", "premium", "g1", calls=(10, 40), price=0.1)
        + cost_model("hosted_vllm/llama", "chat", "d1", calls=(90, 90), price=0.01),
        "expect": [
            {
                "target": {"model": "openai/gpt-4o"},
                "symptom_present": True,
                "causes": ["request_rate_growth"],
            },
            {"target": {"model": "hosted_vllm/llama"}, "no_cause": True},
        ],
    },
]


# ---------------------------------------------------------------------------------------------
# fallback_frequent cooldown_config (layout of rules/fallback_frequent.test.yaml)


def fallback_case(cooldowns: str | None, failures_per_min: float, status: str) -> list[dict[str, str]]:
    out = [
        s(
            'litellm_proxy_total_requests_metric_total{requested_model="chat",status_code="200",hashed_api_key="k1"}',
            "0+100x15",
        ),
        s(
            'litellm_deployment_total_requests_total{requested_model="chat",model_id="d1",litellm_model_name="hosted_vllm/llama"}',
            "0+50x15",
        ),
        s(
            'litellm_deployment_total_requests_total{requested_model="chat",model_id="d2",litellm_model_name="hosted_vllm/llama"}',
            "0+50x15",
        ),
        s(
            'litellm_deployment_failure_responses_total{requested_model="chat",model_id="d1",litellm_model_name="hosted_vllm/llama",'
            f'exception_status="{status}",exception_class="Openai.APIError"}}',
            f"0+{num(failures_per_min)}x15",
        ),
        s(
            'litellm_deployment_successful_fallbacks_total{requested_model="chat",fallback_model="chat-backup",hashed_api_key="k1",'
            f'exception_status="{status}",exception_class="Openai.APIError"}}',
            "0+6x15",
        ),
    ]
    if cooldowns is not None:
        out.append(
            s(
                f'litellm_deployment_cooled_down_total{{model_id="d1",litellm_model_name="hosted_vllm/llama",exception_status="{status}"}}',
                cooldowns,
            )
        )
    return out


FALLBACK: list[dict[str, Any]] = [
    {
        # LiteLLM cools a deployment down on a 429 at once, whatever allowed_fails says: 1.5
        # failures per 429 cooldown says nothing about allowed_fails, and "raise allowed_fails"
        # would not stop these cooldowns. The check counts neither 429 failures nor 429 cooldowns
        # (rules/fallback_frequent.test.yaml "every failure cools the deployment down" uses 500s).
        "name": "fallback_429_cooldowns_do_not_blame_allowed_fails",
        "eval_time": "15m",
        "input_series": fallback_case("0+2x15", 3, "429"),
        "expect": [
            {
                "target": {"model_group": "chat"},
                "symptom_present": True,
                "absent_causes": ["cooldown_too_sensitive"],
            }
        ],
    },
    {
        # Pins the rewritten zero case: failures but no cooldown series at all: clear, not unknown.
        "name": "fallback_failures_without_any_cooldown_are_clear",
        "eval_time": "15m",
        "input_series": fallback_case(None, 3, "500"),
        "expect": [
            {
                "target": {"model_group": "chat"},
                "symptom_present": True,
                "absent_causes": ["cooldown_too_sensitive"],
                "checks": {"cooldown_config": "clear"},
            }
        ],
    },
    {
        # Pins the rewritten zero case: a cooldown counter that exists but did not move.
        "name": "fallback_failures_with_a_flat_cooldown_counter_are_clear",
        "eval_time": "15m",
        "input_series": fallback_case("5+0x15", 3, "500"),
        "expect": [
            {
                "target": {"model_group": "chat"},
                "symptom_present": True,
                "checks": {"cooldown_config": "clear"},
            }
        ],
    },
    {
        # The check can fail the other way: 1 failure per cooldown (500s, allowed_fails=1 style).
        "name": "fallback_one_500_per_cooldown_matches",
        "eval_time": "15m",
        "input_series": fallback_case("0+3x15", 3, "500"),
        "expect": [
            {
                "target": {"model_group": "chat"},
                "symptom_present": True,
                "causes": ["cooldown_too_sensitive"],
                "checks": {"cooldown_config": "matched"},
            }
        ],
    },
]


# ---------------------------------------------------------------------------------------------
# streaming_interrupted (layout of rules/streaming_interrupted.test.yaml: baseline 0-70m, now
# 1d40m-1d1h, evaluated at 1d1h; aborts over a 10m window, restarts over 30m)


def stream_pod(pod: str, *, restarts: str, reason: str | None) -> list[dict[str, str]]:
    # A vLLM that books its aborts as finished requests (finished_reason="abort", as with vLLM's
    # fix for issue 55634): every prefilled prompt, aborted or not, reaches the request_prompt_tokens
    # histogram, so prompt_tokens_total (1000 tokens a prompt, counted at the first token) grows
    # as its _sum does. 600 requests a minute, about 50 running at any time.
    labels = f'namespace="{NS}",pod="{pod}",model_name="m",engine="0"'
    out = [
        s(f"vllm:prompt_tokens_total{{{labels}}}", "0+600000x70 _x1409 900000000+600000x20"),
        s(f"vllm:request_prompt_tokens_sum{{{labels}}}", "0+600000x70 _x1409 900000000+600000x20"),
        s(f"vllm:request_prompt_tokens_count{{{labels}}}", "0+600x70 _x1409 900000+600x20"),
        s(f"vllm:num_requests_running{{{labels}}}", "50x70 _x1409 50x20"),
        s(
            f'vllm:request_success_total{{namespace="{NS}",pod="{pod}",model_name="m",engine="0",finished_reason="stop"}}',
            "0+588x70 _x1409 900000+480x20",
        ),
        s(
            f'vllm:request_success_total{{namespace="{NS}",pod="{pod}",model_name="m",engine="0",finished_reason="abort"}}',
            "0+12x70 _x1409 20000+120x20",
        ),
        s(
            f'vllm:request_success_total{{namespace="{NS}",pod="{pod}",model_name="m",engine="0",finished_reason="length"}}',
            "0x70 _x1409 0x20",
        ),
        s(
            f'kube_pod_container_status_restarts_total{{namespace="{NS}",pod="{pod}",container="vllm",uid="u0"}}',
            restarts,
        ),
        s(
            f'DCGM_FI_DEV_FB_USED{{namespace="{NS}",pod="{pod}",container="vllm",gpu="0",UUID="GPU-{pod}"}}',
            "_x1460 40000x40",
        ),
        s(
            f'DCGM_FI_DEV_FB_FREE{{namespace="{NS}",pod="{pod}",container="vllm",gpu="0",UUID="GPU-{pod}"}}',
            "_x1460 40000x40",
        ),
    ]
    if reason:
        out.append(
            s(
                f'kube_pod_container_status_last_terminated_reason{{namespace="{NS}",pod="{pod}",container="vllm",uid="u0",reason="{reason}"}}',
                "_x1476 1x24",
            )
        )
    return out


STREAMING: list[dict[str, Any]] = [
    {
        # A client release with a short timeout: aborts 2% -> 20% for the last 10 minutes. The
        # container restarted once 25 minutes ago (liveness probe, exit Error), inside the 30m
        # restart window but before the 10m abort window: the aborts counted now are on the new
        # process and cannot be the restart's in-flight requests (those die with the old
        # process's counters). Formerly engine_restart explained client_disconnect away.
        "name": "streaming_old_restart_does_not_explain_current_disconnects",
        "eval_time": "1d1h",
        "input_series": stream_pod("vllm-0", restarts="_x1460 0x15 1x24", reason="Error"),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "causes": ["client_disconnect"],
            }
        ],
    },
]


# ---------------------------------------------------------------------------------------------
# gpu_underutilized


def under_pod(pod: str, node: str, *, running: float) -> list[dict[str, str]]:
    out = [
        s(vllm("e2e_request_latency_seconds_bucket", pod, le=le), counter(120, now))
        for le, now in (("1", 0), ("5", 0), ("20", 120), ("+Inf", 120))
    ]
    out += [
        s(vllm("request_success_total", pod, finished_reason="stop"), counter(120, 120)),
        s(vllm("num_requests_running", pod), gauge(30, running)),
        # The lowered limit holds requests back: they wait for a place in the small batch.
        s(vllm("num_requests_waiting", pod), gauge(0, 20)),
        s(vllm("iteration_tokens_total_sum", pod), counter(480000, 480000)),
        s(vllm("iteration_tokens_total_count", pod), counter(1200, 1200)),
        s(f'process_cpu_seconds_total{{namespace="{NS}",pod="{pod}"}}', counter(18, 18)),
        s(dcgm("DCGM_FI_DEV_GPU_UTIL", pod), gauge(85, 20)),
        s(dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", pod), gauge(40, 4)),
        s(
            f'kube_pod_container_resource_requests{{namespace="{NS}",pod="{pod}",container="engine",node="{node}",'
            'resource="nvidia_com_gpu",unit="integer"}',
            gauge(1, 1),
        ),
    ]
    return out


def node_nic(node: str, rx_per_min: float) -> list[dict[str, str]]:
    labels = f'instance="{node}:9100",job="node-exporter",device="eth0"'
    return [
        s(f"node_network_transmit_bytes_total{{{labels}}}", counter(75e9, 75e9)),
        s(f"node_network_receive_bytes_total{{{labels}}}", counter(75e9, rx_per_min)),
        s(f"node_network_speed_bytes{{{labels}}}", gauge(12.5e9, 12.5e9)),
    ]


UNDERUTILIZED: list[dict[str, Any]] = [
    {
        # A plain (not PD) chat engine now runs 3 requests at a time (a rollout set
        # --max-num-seqs 4), while a dataset sync by another pod fills node-a's NIC at 95%. A
        # non-PD engine moves only request text over the NIC: the busy NIC keeps nothing out of
        # its batch. Formerly network_bound (any NIC of the node, PD or not) explained
        # batch_too_small away, and the report points at the network.
        "name": "underutilized_busy_node_nic_does_not_explain_a_small_batch",
        "eval_time": EVAL,
        "input_series": under_pod("vllm-0", "node-a", running=3) + node_nic("node-a", 712.5e9),
        "expect": [
            {
                "target": target("vllm-0"),
                "symptom_present": True,
                "causes": ["batch_too_small"],
            }
        ],
    },
]


CASES: dict[str, list[dict[str, Any]]] = {
    "ttft_high": TTFT,
    "queue_backlog": QUEUE,
    "kv_hit_low": KV_HIT,
    "memory_high_qps_low": MEMORY,
    "nccl_failure": NCCL,
    "cost_increase": COST,
    "fallback_frequent": FALLBACK,
    "streaming_interrupted": STREAMING,
    "gpu_underutilized": UNDERUTILIZED,
}
ALL = [(tree, case["name"]) for tree, cases in CASES.items() for case in cases]


@cache
def outcomes(directory: str) -> dict[tuple[str, str], CaseResult]:
    work = Path(directory)
    for path in RULES.iterdir():
        if path.is_file() and not path.name.endswith(".test.yaml"):
            shutil.copy(path, work / path.name)
    for tree, cases in CASES.items():
        (work / f"{tree}.test.yaml").write_text(yaml.safe_dump({"interval": "1m", "tests": cases}, allow_unicode=True))
    merged: dict[tuple[str, str], CaseResult] = {}
    for r in collect(work, only=list(CASES)):
        # A notation problem and the evaluation of the same case are two results: keep both.
        merged.setdefault((r.tree, r.name), CaseResult(r.tree, r.name)).failures.extend(r.failures)
    return merged


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], CaseResult]:
    return outcomes(str(tmp_path_factory.mktemp("review-rules")))


@pytest.mark.parametrize(("tree", "name"), ALL, ids=lambda v: v)
def test_review_case(results: dict[tuple[str, str], CaseResult], tree: str, name: str) -> None:
    _assert_passed(results, tree, name)


def _assert_passed(results: dict[tuple[str, str], CaseResult], tree: str, name: str) -> None:
    problems = [r for r in results.values() if r.name == "(test file)"]
    assert not problems, [p.failures for p in problems]
    result = results.get((tree, name))
    assert result is not None, f"{tree}: {name} did not run"
    assert result.passed, "\n".join(result.failures)


# ---------------------------------------------------------------------------------------------
# Engine semantics of `explains`, without a backend


def _cause(cause: str, severity: str = "warning", warnings: tuple[str, ...] = ()) -> RootCause:
    text = Text(zh="中", en="en")
    evidence = Evidence(check=cause, query="q", operator="above", threshold=1.0, value=2.0, warnings=warnings)
    return RootCause(
        cause=cause,
        title=text,
        severity=Severity(severity),
        remediation=(text,),
        check=cause,
        depth=1,
        excess=2.0,
        evidence=(evidence,),
    )


def test_partial_match_does_not_explain_a_full_match_away() -> None:
    # A partial answer "can show a problem but never rule one out" (docs/rules.md). Demoting a
    # fully observed cause to a consequence is ruling it out as a root cause: the explaining
    # match, seen only with a store missing, must not do it.
    partial = _cause("autoscaling_lagging", warnings=("store eu-1 unavailable",))
    full = _cause("kv_pool_full")
    roots, consequences, _ = rank([partial, full], {"autoscaling_lagging": [("kv_pool_full", None)]})
    assert "kv_pool_full" in [c.cause for c in roots]
    assert consequences == ()


def test_partial_match_explains_another_partial_one() -> None:
    # Both seen with the same store missing: the explanation stands (nothing fully observed is hidden).
    partial = _cause("autoscaling_lagging", warnings=("store eu-1 unavailable",))
    other = _cause("kv_pool_full", warnings=("store eu-1 unavailable",))
    roots, consequences, _ = rank([partial, other], {"autoscaling_lagging": [("kv_pool_full", None)]})
    assert [c.cause for c in roots] == ["autoscaling_lagging"]
    assert [c.cause for c in consequences] == ["kv_pool_full"]


def test_a_less_severe_cause_never_explains_a_more_severe_one_at_run_time() -> None:
    # Whatever a declaration says (trees from elsewhere, a param override), the critical cause stays a root.
    crc, link = _cause("switch_crc_errors", "warning"), _cause("ib_link_down", "critical")
    roots, consequences, _ = rank([crc, link], {"switch_crc_errors": [("ib_link_down", None)]})
    assert [c.cause for c in roots] == ["ib_link_down", "switch_crc_errors"]
    assert consequences == ()


def _declarations() -> list[tuple[str, str, str, str, str]]:
    """(tree, explaining cause, its severity, explained cause, its severity) for every declaration."""
    out = []
    for tree_id, tree in load_rules(RULES).trees.items():
        concluded: dict[str, Conclusion] = {}
        for node, _ in walk(list(tree.nodes)):
            c = getattr(node, "conclusion", None)
            if c is not None:
                concluded[c.cause] = c
        for cause, c in concluded.items():
            for e in c.explains or ():
                out.append((tree_id, cause, str(c.severity), e.cause, str(concluded[e.cause].severity)))
    return out


RANK = {"critical": 0, "warning": 1, "info": 2}


def test_no_explanation_demotes_a_more_severe_cause() -> None:
    # An explanation moves the explained cause out of the ranked list; where the explained cause
    # is the more severe, the most severe finding of the diagnosis is no longer its first root cause.
    inverted = [d for d in _declarations() if RANK[d[4]] < RANK[d[2]]]
    assert inverted == []


# ---------------------------------------------------------------------------------------------
# The load-time rules of `explains`


def _tree(*nodes: dict[str, Any]) -> Tree:
    text = {"zh": "中", "en": "en"}
    return Tree.model_validate(
        {
            "id": "queue_backlog",
            "title": text,
            "target": ["namespace", "pod"],
            "params": {"window": {"default": "10m", "doc": "d"}},
            "detect": {"title": text, "query": "max by ($target) (waiting)", "compare": {"above": 10}},
            "nodes": list(nodes),
        }
    )


def _node(cause: str, compare: dict[str, Any], **conclusion: Any) -> dict[str, Any]:
    text = {"zh": "中", "en": "en"}
    basis = conclusion.pop("basis", "metric")
    out: dict[str, Any] = {"id": cause, "title": text, "query": f"max by ($target) ({cause})", "compare": compare}
    out["basis"] = basis
    out["conclusion"] = {"cause": cause, "title": text, "remediation": [text], **conclusion}
    if basis == "derived":
        out["conclusion"]["caveat"] = text
    return out


def _explains_problems(tree: Tree) -> list[str]:
    return [message for loc, message in check_tree(tree, tree.id, None) if "explains" in loc]


RATIO = {"ratio_above": 1.5, "baseline": "1d"}


def test_a_less_severe_cause_cannot_explain_a_more_severe_one() -> None:
    found = _explains_problems(
        _tree(_node("crc", RATIO, explains=["link_down"]), _node("link_down", RATIO, severity="critical"))
    )
    (message,) = found
    assert "never demotes a more severe cause" in message


def test_a_derived_check_explains_only_with_a_slack() -> None:
    unsized = _tree(_node("guess", RATIO, basis="derived", explains=["load"]), _node("load", RATIO))
    (found,) = _explains_problems(unsized)
    assert "'guess' is a derived check" in found
    assert "size check (slack) or not at all" in found
    sized = _tree(
        _node("guess", RATIO, basis="derived", explains=[{"cause": "load", "slack": 1.5}]), _node("load", RATIO)
    )
    assert _explains_problems(sized) == []


def test_a_standing_check_cannot_explain() -> None:
    # No baseline on its branch: a slack cannot be given (nothing to size), so it explains nothing.
    standing = _tree(_node("config", {"above": 0.5}, explains=["load"]), _node("load", RATIO))
    (found,) = _explains_problems(standing)
    assert "a standing state" in found
    sized = _tree(_node("config", {"above": 0.5}, explains=[{"cause": "load", "slack": 1.5}]), _node("load", RATIO))
    assert any("has no ratio_above / ratio_below check on its branch" in m for m in _explains_problems(sized))
    # A change compared with its baseline (a delta too) explains without a size check.
    change = _tree(_node("surge", {"delta_above": 5, "baseline": "1d"}, explains=["load"]), _node("load", RATIO))
    assert _explains_problems(change) == []


# ---------------------------------------------------------------------------------------------
# The top_bucket context queries, asked of a real Prometheus as written (no engine rewriting)


def _top_bucket_query(tree_id: str, check_id: str) -> str:
    tree = load_rules(RULES).trees[tree_id]
    node = next(n for n, _ in walk(list(tree.nodes)) if n.id == check_id)
    context = next(c for c in getattr(node, "context", ()) if c.id == "top_bucket")
    return str(context.query).replace("$target", "namespace, pod")


@pytest.mark.parametrize(
    ("tree_id", "check_id"), [("ttft_high", "long_prompt_blocking"), ("queue_backlog", "long_requests_hogging")]
)
def test_top_bucket_query_reads_the_largest_finite_bound(
    start_prometheus: StartPrometheus, tree_id: str, check_id: str
) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()

    def hist(name: str, pod: str, bounds: dict[str, float], **labels: str) -> list[Series]:
        return [
            Series(
                name, {"namespace": NS, "pod": pod, "le": le, **labels}, [(start + 60 * i, v * i) for i in range(11)]
            )
            for le, v in bounds.items()
        ]

    series = [
        # 64K context: buckets stop at 50000; no observation above it (the top bound is still 50000).
        *hist("vllm:request_prompt_tokens_bucket", "vllm-0", {"5000": 10, "20000": 10, "50000": 10, "+Inf": 10}),
        # Two models in one pod with different contexts: the larger bound wins.
        *hist("vllm:request_prompt_tokens_bucket", "vllm-1", {"20000": 5, "+Inf": 5}, model_name="a"),
        *hist("vllm:request_prompt_tokens_bucket", "vllm-1", {"20000": 5, "100000": 5, "+Inf": 5}, model_name="b"),
        *hist("sglang:prompt_tokens_histogram_bucket", "sglang-0", {"1000": 3, "132000": 3, "+Inf": 3}),
    ]
    prom = start_prometheus(series)
    query = _top_bucket_query(tree_id, check_id)
    url = f"{prom.url}/api/v1/query?" + urllib.parse.urlencode({"query": query, "time": start + 600})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    got = {r["metric"]["pod"]: float(r["value"][1]) for r in body["data"]["result"]}
    assert got == {"vllm-0": 50000.0, "vllm-1": 100000.0, "sglang-0": 132000.0}
