"""The workload model's promises: counters only grow (until a restart resets them), histograms stay
cumulative and agree with _count and _sum, and a run is a pure function of scenario, seed and anchor."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import yaml

from diagnosd.sim import scenario
from diagnosd.sim.exporters import families
from diagnosd.sim.exposition import text
from diagnosd.sim.simulator import Simulator
from tests.sim.conftest import ANCHOR, samples, short

Series = tuple[str, tuple[tuple[str, str], ...]]


def _restarting(tmp_path: Path) -> Simulator:
    doc = {
        "extends": "healthy",
        "title": {"en": "restarts", "zh": "重启"},
        "faults": [
            {
                "target": "pod/vllm-llama-8b/0",
                "start": "-50m",
                "what": "OOM kill every 20 minutes",
                "restart": {"reason": "OOMKilled", "exit_code": 137, "downtime": "3m", "every": "20m"},
            }
        ],
    }
    path = tmp_path / "restarting.yaml"
    path.write_text(yaml.safe_dump(doc))
    return Simulator(scenario.load(str(path)), anchor=ANCHOR, history=7200.0, coarse=900.0)


def _is_cumulative(name: str) -> bool:
    return name.endswith(("_total", "_bucket", "_count", "_sum")) and not name.startswith("kube_")


def test_counters_grow_and_reset_only_when_the_container_restarts(tmp_path: Path) -> None:
    sim = _restarting(tmp_path)
    pod = sim.pods["pod/vllm-llama-8b/0"]
    last: dict[Series, float] = {}
    resets: dict[str, int] = defaultdict(int)
    restarts_seen = 0
    for _ in sim.advance(ANCHOR):
        for (name, labels), value in samples(sim).items():
            if not _is_cumulative(name):
                continue
            before = last.get((name, labels))
            if before is not None and value < before:
                resets[dict(labels).get("pod", "?")] += 1
                assert dict(labels).get("pod") == pod.name, f"{name} went down on a pod that never restarted"
            last[(name, labels)] = value
        restarts_seen = pod.restarts
    assert restarts_seen == 3  # at -50m, -30m and -10m
    assert resets[pod.name] > 0
    assert pod.last_exit is not None
    assert pod.last_exit.reason == "OOMKilled"


def test_the_restarted_pod_is_absent_while_loading_and_kube_state_metrics_says_why(tmp_path: Path) -> None:
    sim = _restarting(tmp_path)
    sim.run(ANCHOR - 10 * 60 + 60)  # one minute into the third downtime
    values = samples(sim)
    name = sim.pods["pod/vllm-llama-8b/0"].name
    assert not any(n == "vllm:num_requests_running" and dict(labels)["pod"] == name for n, labels in values)
    restarts = [
        v
        for (n, labels), v in values.items()
        if n == "kube_pod_container_status_restarts_total" and ("pod", name) in labels
    ]
    assert restarts == [3.0]
    reasons = [
        dict(labels)["reason"]
        for (n, labels) in values
        if n == "kube_pod_container_status_last_terminated_reason" and ("pod", name) in labels
    ]
    assert reasons == ["OOMKilled"]


def test_histograms_are_cumulative_and_agree_with_count_and_sum() -> None:
    sim = short("long_prompt_blocking")
    checked = 0
    for family in families(sim):
        if family.kind != "histogram":
            continue
        buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = defaultdict(list)
        counts: dict[tuple[tuple[str, str], ...], float] = {}
        sums: dict[tuple[tuple[str, str], ...], float] = {}
        for s in family.samples:
            if s.name.endswith("_bucket"):
                le = dict(s.labels)["le"]
                buckets[tuple(p for p in s.labels if p[0] != "le")].append((float(le), s.value))
            elif s.name.endswith("_count"):
                counts[s.labels] = s.value
            else:
                sums[s.labels] = s.value
        for labels, points in buckets.items():
            values = [v for _, v in sorted(points)]
            assert values == sorted(values), f"{family.name} buckets not cumulative"
            assert values[-1] == counts[labels], f"{family.name}: +Inf bucket != _count"
            assert sums[labels] >= 0.0
            finite = [le for le, _ in sorted(points) if math.isfinite(le)]
            if counts[labels] > 0 and values[-1] == values[-2]:  # nothing beyond the last bound
                assert sums[labels] <= counts[labels] * finite[-1] * 1.01
            checked += 1
    assert checked > 100


def test_a_run_is_a_function_of_scenario_seed_and_anchor() -> None:
    first = text(families(short("prompt_inflation")))
    again = text(families(short("prompt_inflation")))
    other_seed = text(families(short("prompt_inflation", seed=7)))
    assert first == again
    assert first != other_seed


def test_live_series_continue_the_history_where_they_meet() -> None:
    """One run up to the anchor (what --out writes) and another carried on live agree at the anchor."""
    history = short("kv_pool_full")
    at_anchor = samples(history)
    live = short("kv_pool_full", run=False)
    live.run(ANCHOR)
    assert samples(live) == at_anchor
    live.run(ANCHOR + 30.0)
    assert live.time == ANCHOR + 30.0  # live ticks are one second long
    after = samples(live)
    grew = [k for k, v in at_anchor.items() if k[0] == "vllm:prompt_tokens_total" and after.get(k, 0.0) > v]
    assert grew, "live counters continue from the history's last values"
    assert all(after[k] >= v for k, v in at_anchor.items() if k[0] == "vllm:prompt_tokens_total")


def test_gauges_stay_in_their_ranges() -> None:
    for (name, _), value in samples(short("memory_bandwidth_saturated")).items():
        if name in ("vllm:kv_cache_usage_perc", "sglang:token_usage"):
            assert 0.0 <= value <= 1.0
        if name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"):
            assert 0.0 <= value <= 100.0


def test_a_fault_changes_only_its_pod_and_only_from_its_start() -> None:
    sim = short("prefix_cache_disabled", run=False)
    sim.run(ANCHOR - 51 * 60)
    before = {k: s.knobs.prefix_caching for k, s in sim.pods.items()}
    sim.run(ANCHOR)
    after = {k: s.knobs.prefix_caching for k, s in sim.pods.items()}
    assert all(before.values())
    assert [k for k, on in after.items() if not on] == ["pod/vllm-llama-8b/0"]
