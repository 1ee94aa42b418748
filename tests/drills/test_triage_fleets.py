"""`diagnosd triage` over simulated fleets with a day of backfilled history, one Prometheus each.

The healthy fleets must show nothing on any tree: no symptom present, no root cause, and a symptom
that could not be looked at only where what it reads is absent from that fleet (listed in ABSENT,
with the reason triage must give). The demo's default fault scenario (`kv_pool_full`) must show its
injected fault on its pod and nothing on any target the fault does not reach, and print it first.

Each fleet's history holds the series the trees read, sampled as the trees look at them (every
minute in the windows the trees read before the anchor and a baseline earlier, hourly elsewhere
and as far back as the longest window: see diagnosd/drills/windows.py), so the baselines exist.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime

import pytest

from diagnosd.cli import main
from diagnosd.daemon import compose
from diagnosd.drills import windows
from diagnosd.drills.verify import backfilled_series, metric_names, simulated, spelled
from diagnosd.engine import Scope
from diagnosd.findings.triage import Board
from diagnosd.promlocal import LocalPrometheus
from diagnosd.sim import scenario
from diagnosd.sim.batch import Job
from diagnosd.sim.fleet import layout
from diagnosd.sim.history import as_series
from diagnosd.sources import PrometheusConfig
from tests.sim.conftest import ANCHOR

pytestmark = pytest.mark.slow

AT = datetime.fromtimestamp(ANCHOR, UTC)
HEALTHY = ("healthy", "healthy_moe", "healthy_pd")
FAULT = "kv_pool_full"

# Symptoms a fleet cannot show because what they read is not part of it: unknown with that reason,
# naming it (never clear, never present). Reasons: the exporter is absent, or the exporter is
# there but not the optional feature whose family the tree reads.
GATEWAY = ("routing_imbalance", "fallback_frequent", "cost_increase", "tenant_usage_anomaly")
LITELLM = ("exporter_absent", "LiteLLM")
NIXL = ("metric_absent", "vllm:nixl_xfer_time_seconds")  # vLLM without the NIXL KV connector
# Trees whose subject the fleet does not have, so no target: pods created (started) within the
# last hour for the start trees, a canary (track="canary") for canary_regression, an engine on
# several GPUs for nccl_failure.
NONE_NOW = ("no_data", "no target has a value now")
STARTS = dict.fromkeys(("cold_start_timeout", "model_load_slow"), NONE_NOW)
NO_CANARY = {"canary_regression": NONE_NOW}
NO_MULTI_GPU = {"nccl_failure": ("no_baseline", "and no value now")}
ABSENT: dict[str, dict[str, tuple[str, str]]] = {
    "healthy": {"pd_kv_transfer_slow": NIXL, **STARTS},
    # SGLang with expert parallelism, called directly: no gateway, no KV transfer.
    "healthy_moe": {**dict.fromkeys(GATEWAY, LITELLM), "pd_kv_transfer_slow": NIXL, **STARTS, **NO_CANARY},
    # Decode pods called directly by a RAG service: no gateway.
    "healthy_pd": {**dict.fromkeys(GATEWAY, LITELLM), **STARTS, **NO_CANARY, **NO_MULTI_GPU},
}


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Each fleet's day of history backfilled into its own Prometheus: name -> URL."""
    rules = compose.load()
    names = frozenset().union(*(metric_names(tree, rules) for tree in rules.ruleset.trees.values()))
    plan = spelled(windows.plan(windows.looks(rules.ruleset.trees.values())), rules)
    work = tmp_path_factory.mktemp("fleets")
    with ExitStack() as stack:
        urls: dict[str, str] = {}
        for name in (*HEALTHY, FAULT):
            (work / name).mkdir()
            jobs = [Job(scenario.load(name), names, ())]
            batches = simulated(jobs, plan, anchor=ANCHOR, seed=0, parallel=False)
            tsdb = backfilled_series((as_series(series) for series in batches), work / name, name)
            prom = stack.enter_context(LocalPrometheus(work / name / "prometheus", tsdb=tsdb))
            urls[name] = prom.url
        yield urls


def board(url: str) -> Board:
    async def run() -> Board:
        config = PrometheusConfig(url=url, timeout=60.0)
        async with compose.diagnoser(config, compose.load()) as diagnoser:
            return await diagnoser.triage(Scope(), AT)

    return asyncio.run(run())


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_fleet_shows_nothing_on_any_tree(fleets: dict[str, str], name: str) -> None:
    result = board(fleets[name])
    present = [
        f"{p.symptom} on {dict(h.labels)}: {h.cause.cause if h.cause else 'no cause'}"
        for p in result.present
        for h in p.hits
    ]
    assert not present, "\n".join(present)
    unknown = {u.symptom: u.reasons for u in result.unknown}
    assert set(unknown) == set(ABSENT[name]), {s: [(r.reason, r.detail) for r in rs] for s, rs in unknown.items()}
    for symptom, reasons in unknown.items():
        reason, named = ABSENT[name][symptom]
        assert [r.reason for r in reasons] == [reason], (symptom, reasons)
        assert named in reasons[0].detail, (symptom, reasons[0].detail)
    assert len(result.clear) + len(unknown) == len(compose.load().ruleset.trees)


def _fault(name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The injected fault's own target, and every target it reaches: its pod, model and model group."""
    fault = scenario.load(name)
    assert fault.fleet is not None
    fleet = layout(fault.fleet)
    pod = fleet.pod(fault.expect[0].target)
    group = fleet.group_of(pod)
    own = fleet.labels(fault.expect[0].target)
    reached = [own, {"model": pod.litellm_model}, *([{"model_group": group.name}] if group else [])]
    return own, reached


def test_triage_on_the_demo_fleet_shows_the_fault_where_it_is_and_clear_elsewhere(
    fleets: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The fault's symptom and cause on its pod; whatever else shows is on what the fault reaches
    (120 000-token prompts on that pod raise its TTFT, cost and KV reads, empty its prefix cache
    and, with its gateway weight cut, skew its model group); every other target is clear."""
    fault = scenario.load(FAULT)
    own, reached = _fault(FAULT)
    assert main(["triage", "--prometheus", fleets[FAULT], "--at", AT.isoformat(), "--format", "json"]) == 4
    body = json.loads(capsys.readouterr().out)
    present = {p["symptom"]: p["hits"] for p in body["present"]}
    for expectation in fault.expect:
        (hit,) = present[expectation.symptom]
        assert hit["labels"] == own
        assert hit["cause"]["cause"] == expectation.causes[0]
    elsewhere = [(s, h["labels"]) for s, hits in present.items() for h in hits if h["labels"] not in reached]
    assert not elsewhere
    unknown = {u["symptom"]: [r["reason"] for r in u["reasons"]] for u in body["unknown"]}
    assert unknown == {symptom: [reason] for symptom, (reason, _) in ABSENT[fault.extends or "healthy"].items()}
    assert len(body["clear"]) + len(present) + len(unknown) == len(compose.load().ruleset.trees)


def test_triage_on_the_demo_fleet_prints_the_injected_fault_first(
    fleets: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The injected cause leads the board: the symptoms it is the top cause of, on its pod, first."""
    fault = scenario.load(FAULT)
    own, _ = _fault(FAULT)
    assert main(["triage", "--prometheus", fleets[FAULT], "--at", AT.isoformat()]) == 4
    lines = capsys.readouterr().out.splitlines()
    present = [i for i, line in enumerate(lines) if line.startswith("▲ ")]
    where = " ".join(f"{k}={v}" for k, v in own.items())
    expected = {e.symptom: e.causes[0] for e in fault.expect}
    leading = [lines[i].split()[1] for i in present[: len(expected)]]
    assert sorted(leading) == sorted(expected), lines
    for i in present[: len(expected)]:
        symptom = lines[i].split()[1]
        assert lines[i + 1].startswith(f"    {where} → {expected[symptom]} "), lines[i : i + 2]
