"""Review of 47be684 (engine/narrowed.py): a round's diagnosis asks the detect over the whole
scope, then walks the tree over the targets where the symptom is not clear, the scope narrowed to
them, and merges the two; claimed to say what the whole walk says of every target that is not
clear, fleet-level results included, and to walk the whole scope wherever narrowing would change
an answer.

Found:
- A fleet-level check whose answer, narrowed to the walked targets, is empty (a `count(x < 10)`
  of idle GPUs where the walked pods' GPUs are busy, the idle ones belonging to clear pods) is not
  seen as fleet-level by the narrowed walk, so the whole scope is never walked: the fleet result
  is missing, the walked targets read the check `no data` instead of `fleet_level`, and a round
  that saw every target resolves the active fleet-level finding as gone while it still holds.
- With no `at`, the detect pass and the walk are evaluated at two moments (each asks the clock):
  a target present at the first can be judged from the second (where it no longer is).
- A family absent from the Prometheus is noted twice (the detect pass' note and the walk's, each
  counting the names its own tree reads).
- Where the narrowed walk is redone over the whole scope, the diagnosis counts the queries of
  two of its three passes.

Checked and sound (tests below pass): on a real Prometheus, every target that is not clear is
diagnosed as by the whole walk through a compound sustained detect, a traffic-gated check, a
baseline, old and new vLLM spellings side by side, kube-state-metrics series relabelled
`exported_*`; a clear target keeps the whole walk's detect; the branches are read for the walked
pods alone; more walked targets than MAX_CHOICES leave the pod label out of the narrowed scope.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from diagnosd.daemon import compose
from diagnosd.engine import Looking, Scope
from diagnosd.engine.narrowed import diagnose_narrowed
from diagnosd.findings.lifecycle import ResolvedBy, State, Trigger
from diagnosd.findings.model import Diagnosis, Reason, TargetDiagnosis, Verdict
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from diagnosd.promlocal import LocalPrometheus, backfill
from diagnosd.promlocal.openmetrics import Series, write
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.sources.base import Sample
from diagnosd.trees.model import Tree
from tests.engine.fakes import Answer, FakeSource, samples

TEXT = {"zh": "中", "en": "en"}
AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
START = AT - timedelta(minutes=40)
STEP = 15.0
PODS = ("vllm-0", "vllm-1", "vllm-2", "vllm-3")


def cause(name: str) -> dict[str, Any]:
    return {"cause": name, "title": TEXT, "remediation": [TEXT]}


def detect() -> dict[str, Any]:
    """Queued requests sustained above 10, or (never here) a huge running batch."""
    return {
        "title": TEXT,
        "any": [
            {
                "id": "waiting",
                "title": TEXT,
                "query": "max by ($target) (vllm:num_requests_waiting)",
                "compare": {"above": 10},
                "sustained": {"for": "5m", "share": 0.8},
            },
            {
                "id": "running",
                "title": TEXT,
                "query": "max by ($target) (vllm:num_requests_running)",
                "compare": {"above": 500},
            },
        ],
    }


def plain_tree() -> Tree:
    """Per-target checks only: a traffic-gated one, a baseline, a kube-state-metrics count."""
    return Tree.model_validate(
        {
            "id": "queue_review",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": detect(),
            "traffic": {"query": "sum by ($target) (rate(vllm:request_success_total[5m]))", "min": 0.05},
            "nodes": [
                {
                    "id": "kv_full",
                    "title": TEXT,
                    "query": "max by ($target) (vllm:kv_cache_usage_perc)",
                    "compare": {"above": 0.9},
                    "needs_traffic": True,
                    "conclusion": cause("kv_pool_full"),
                },
                {
                    "id": "kv_grew",
                    "title": TEXT,
                    "query": "max by ($target) (vllm:kv_cache_usage_perc)",
                    "compare": {"ratio_above": 1.5, "baseline": "15m"},
                    "conclusion": cause("kv_grew"),
                },
                {
                    "id": "restarts",
                    "title": TEXT,
                    "query": "sum by ($target) (kube_pod_container_status_restarts_total)",
                    "compare": {"above": 0},
                    "conclusion": cause("engine_restart"),
                },
            ],
        }
    )


def fleet_tree() -> Tree:
    """A check fleet-wide by nature (docs/rules.md: left unlabelled): idle GPUs anywhere."""
    return Tree.model_validate(
        {
            "id": "queue_review_fleet",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": detect(),
            "nodes": [
                {
                    "id": "idle_gpus",
                    "title": TEXT,
                    "query": "count(DCGM_FI_DEV_GPU_UTIL < 10)",
                    "compare": {"above": 0},
                    "conclusion": cause("idle_gpus"),
                },
                {
                    "id": "kv_full",
                    "title": TEXT,
                    "query": "max by ($target) (vllm:kv_cache_usage_perc)",
                    "compare": {"above": 0.9},
                    "conclusion": cause("kv_pool_full"),
                },
            ],
        }
    )


def points(before: float, after: float | None = None, *, since: float = 8.0) -> list[tuple[float, float]]:
    """Every 15 s from START to AT: `before`, then `after` for the last `since` minutes."""
    out = []
    t = START.timestamp()
    while t <= AT.timestamp():
        late = after is not None and t > AT.timestamp() - since * 60
        out.append((t, after if late and after is not None else before))
        t += STEP
    return out


def counter(rate: float) -> list[tuple[float, float]]:
    return [(t, 100.0 + rate * (t - START.timestamp())) for t, _ in points(0.0)]


def history() -> list[Series]:
    """vllm-0: a long queue, a KV pool that filled, restarts, GPU busy. vllm-1: short queue (clear),
    a full KV pool all along, GPU idle. vllm-2: a long queue on vLLM 0.9 (the old KV name), no
    traffic, GPU busy. vllm-3: short queue, GPU idle. kube-state-metrics scraped with
    honorLabels false (the pods as exported_*)."""
    out: list[Series] = []
    waiting = {"vllm-0": 25.0, "vllm-1": 2.0, "vllm-2": 30.0, "vllm-3": 1.0}
    gpu = {"vllm-0": 95.0, "vllm-1": 3.0, "vllm-2": 85.0, "vllm-3": 4.0}
    rps = {"vllm-0": 1.0, "vllm-1": 1.0, "vllm-2": 0.0, "vllm-3": 1.0}
    restarts = {"vllm-0": 2.0}
    for pod in PODS:
        engine = {"namespace": "prod", "pod": pod, "model_name": "llama", "job": "vllm"}
        out.append(Series("vllm:num_requests_waiting", engine, points(waiting[pod])))
        out.append(Series("vllm:num_requests_running", engine, points(10.0)))
        out.append(Series("vllm:request_success_total", engine, counter(rps[pod])))
        gpu_labels = {"namespace": "prod", "pod": pod, "gpu": "0", "UUID": f"GPU-{pod}"}
        out.append(Series("DCGM_FI_DEV_GPU_UTIL", gpu_labels, points(gpu[pod])))
        ksm = {
            "namespace": "monitoring",
            "pod": "kube-state-metrics-0",
            "container": "kube-state-metrics",
            "exported_namespace": "prod",
            "exported_pod": pod,
            "exported_container": "engine",
        }
        out.append(Series("kube_pod_container_status_restarts_total", ksm, points(restarts.get(pod, 0.0))))
    kv = {"vllm-0": (0.5, 0.96), "vllm-1": (0.96, 0.96), "vllm-3": (0.2, 0.2)}
    for pod, (before, after) in kv.items():
        labels = {"namespace": "prod", "pod": pod, "model_name": "llama", "job": "vllm"}
        out.append(Series("vllm:kv_cache_usage_perc", labels, points(before, after)))
    old = {"namespace": "prod", "pod": "vllm-2", "model_name": "llama", "job": "vllm"}
    out.append(Series("vllm:gpu_cache_usage_perc", old, points(0.5, 0.97)))
    return out


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work: Path = tmp_path_factory.mktemp("narrowed-review")
    with (work / "series.om").open("w") as out:
        write(out, history())
    backfill(work / "series.om", work / "tsdb")
    with LocalPrometheus(work / "prometheus", tsdb=work / "tsdb") as prom:
        yield prom.url


class Recorded:
    """A source that remembers every query it was asked."""

    def __init__(self, source: PrometheusSource) -> None:
        self.source = source
        self.queries: list[str] = []

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.queries.append(promql)
        return await self.source.query(promql, at)

    async def metric_names(
        self, candidates: Any, start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        return await self.source.metric_names(candidates, start, end, where)

    async def metadata(self, names: Any) -> dict[str, str] | None:
        return await self.source.metadata(names)


def both(url: str, tree: Tree) -> tuple[Diagnosis, Diagnosis, list[str]]:
    """The whole walk and the narrowed one at AT over the whole scope, and the narrowed one's queries."""

    async def run() -> tuple[Diagnosis, Diagnosis, list[str]]:
        config = PrometheusConfig(url=url, timeout=30.0)
        looking = Looking(aliases=compose.load().ruleset.aliases, clock=lambda: AT)
        async with config.client() as client:
            source = PrometheusSource(config, client)
            whole = await looking.evaluator(source).diagnose(tree, Scope(), AT)
            recorded = Recorded(source)
            narrowed = await diagnose_narrowed(looking.evaluator(recorded), tree, Scope(), AT)
        return whole, narrowed, recorded.queries

    return asyncio.run(run())


def seen(t: TargetDiagnosis) -> tuple[Any, ...]:
    """What a target's diagnosis says, but the query texts (a narrowed walk's carry its scope)."""
    return (
        t.symptom_present,
        t.detect.verdict,
        t.detect.reason,
        t.detect.evidence.value if t.detect.evidence else None,
        [(c.cause, [e.value for e in c.evidence]) for c in t.root_causes],
        [c.cause for c in t.consequences],
        [c.cause for c in t.possible_causes],
        [(c.id, c.verdict, c.reason, c.evidence.value if c.evidence else None) for c in t.checks],
    )


def pod(t: TargetDiagnosis) -> str:
    return t.labels["pod"]


# Sound: per-target checks on a real Prometheus.


def test_each_target_not_clear_is_diagnosed_as_the_whole_walk_diagnoses_it(prometheus_url: str) -> None:
    whole, narrowed, asked = both(prometheus_url, plain_tree())
    assert [t.labels for t in narrowed.targets] == [t.labels for t in whole.targets]
    assert [pod(t) for t in whole.targets] == list(PODS)  # the ksm pod names no target
    present = {pod(t): t.symptom_present for t in whole.targets}
    assert present == {"vllm-0": True, "vllm-1": False, "vllm-2": True, "vllm-3": False}
    for mine, theirs in zip(narrowed.targets, whole.targets, strict=True):
        if theirs.symptom_present is False:
            assert mine.checks == ()
            assert theirs.checks
            assert seen(mine)[:4] == seen(theirs)[:4], pod(mine)
        else:
            assert seen(mine) == seen(theirs), pod(mine)
    # Not vacuous: the exported_* restarts, the baseline over the old name, the traffic gate.
    by_pod = {pod(t): t for t in narrowed.targets}
    assert sorted(c.cause for c in by_pod["vllm-0"].root_causes) == ["engine_restart", "kv_grew", "kv_pool_full"]
    assert [c.cause for c in by_pod["vllm-2"].root_causes] == ["kv_grew"]
    gated = {c.id: c for c in by_pod["vllm-2"].checks}["kv_full"]
    assert (gated.verdict, gated.reason) == (Verdict.UNKNOWN, Reason.LOW_TRAFFIC)
    # The branches were read for the walked pods alone.
    kv = [q for q in asked if "kv_cache_usage_perc" in q]
    assert kv
    for query in kv:
        assert set(re.findall(r"vllm-\d", query)) == {"vllm-0", "vllm-2"}, query


# Defect: a fleet-level check the walked targets leave empty.


def test_a_fleet_level_check_empty_where_the_walk_narrows_keeps_the_whole_scopes_result(
    prometheus_url: str,
) -> None:
    """Two GPUs idle, both on pods where the symptom is clear: the whole scope counts 2; narrowed
    to the walked pods (their GPUs busy) `count` has no sample, so the narrowed walk meets no
    fleet-level answer and the whole scope is never walked."""
    whole, narrowed, _ = both(prometheus_url, fleet_tree())
    [result] = whole.fleet
    assert (result.check.id, result.check.verdict) == ("idle_gpus", Verdict.MATCHED)
    assert result.check.evidence is not None
    assert result.check.evidence.value == 2.0
    assert [
        (r.check.id, r.check.verdict, r.check.evidence.value if r.check.evidence else None) for r in narrowed.fleet
    ] == [("idle_gpus", Verdict.MATCHED, 2.0)]


def test_a_walked_target_reads_a_fleet_level_check_as_the_whole_walk_reads_it(prometheus_url: str) -> None:
    whole, narrowed, _ = both(prometheus_url, fleet_tree())
    theirs = {pod(t): t for t in whole.targets}["vllm-0"]
    mine = {pod(t): t for t in narrowed.targets}["vllm-0"]
    assert {c.id: c.reason for c in theirs.checks}["idle_gpus"] is Reason.FLEET_LEVEL
    assert seen(mine) == seen(theirs)


def test_a_complete_narrowed_round_does_not_call_a_fleet_finding_that_holds_gone(
    prometheus_url: str, tmp_path: Path
) -> None:
    """The idle GPUs are a fleet-level finding while the symptom holds on vllm-0; the next round,
    walked narrowed over the same data, saw every target and must leave it firing."""
    whole, narrowed, _ = both(prometheus_url, fleet_tree())
    store = Store.open(tmp_path / "findings.db")
    try:
        tracker = Tracker(store)
        fired = tracker.record(whole, trigger=Trigger.ROUND, now=AT, for_=timedelta(0), complete_scope={})
        assert [(f.cause, f.labels, f.state) for f in fired if f.labels.get("level") == "fleet"] == [
            ("idle_gpus", {"level": "fleet"}, State.FIRING)
        ]
        later = AT + timedelta(seconds=30)
        changed = tracker.record(narrowed, trigger=Trigger.ROUND, now=later, for_=timedelta(0), complete_scope={})
        gone = [(f.cause, f.resolved_by) for f in changed if f.resolved_by is ResolvedBy.GONE]
        assert gone == []
        assert ("idle_gpus", State.FIRING) in [(f.cause, f.state) for f in tracker.active()]
    finally:
        store.close()


# Engine units on a fake source.


def fake_tree(**detect_extra: Any) -> Tree:
    return Tree.model_validate(
        {
            "id": "ttft",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": {"title": TEXT, "query": "max by ($target) (ttft_gauge)", "compare": {"above": 2}} | detect_extra,
            "nodes": [
                {
                    "id": "kv",
                    "title": TEXT,
                    "query": "max by ($target) (kv_gauge)",
                    "compare": {"above": 0.9},
                    "conclusion": cause("kv_full"),
                },
            ],
        }
    )


def many(n: int, value: float, **special: float) -> dict[str, float]:
    return {f"vllm-{i}": value for i in range(n)} | special


def test_without_a_time_both_passes_read_the_same_moment() -> None:
    """A clock read once per pass (30 s apart): vllm-7 is slow with a full KV pool at the first
    moment, healthy at the second. The whole walk, asked without a time, reads the first."""

    def ticking() -> Any:
        moments = (AT + timedelta(seconds=30 * i) for i in count())
        return lambda: next(moments)

    def at_first(slow: dict[str, float], calm: dict[str, float]) -> Any:
        def answer(at: datetime) -> Answer:
            return samples(slow if at == AT else calm)

        return answer

    def source() -> FakeSource:
        return FakeSource(
            answers={
                "ttft_gauge": at_first(many(20, 1.0, **{"vllm-7": 5.0}), many(20, 1.0)),
                "kv_gauge": at_first(many(20, 0.5, **{"vllm-7": 0.97}), many(20, 0.5)),
            }
        )

    async def run() -> tuple[Diagnosis, Diagnosis]:
        whole = await Looking(clock=ticking()).evaluator(source()).diagnose(fake_tree(), Scope())
        narrowed = await diagnose_narrowed(Looking(clock=ticking()).evaluator(source()), fake_tree(), Scope())
        return whole, narrowed

    whole, narrowed = asyncio.run(run())
    theirs = {pod(t): t for t in whole.targets}["vllm-7"]
    assert [c.cause for c in theirs.root_causes] == ["kv_full"]
    mine = {pod(t): t for t in narrowed.targets}["vllm-7"]
    assert seen(mine) == seen(theirs)


def test_an_absent_family_is_noted_once_as_the_whole_walk_notes_it() -> None:
    """dcgm-exporter not scraped: the detect reads one of its names, the check another."""
    tree = Tree.model_validate(
        {
            "id": "memory",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": {
                "title": TEXT,
                "all": [
                    {
                        "id": "busy",
                        "title": TEXT,
                        "query": "max by ($target) (ttft_gauge)",
                        "compare": {"above": 2},
                    },
                    {
                        "id": "memory",
                        "title": TEXT,
                        "query": "max by ($target) (DCGM_FI_DEV_FB_USED)",
                        "compare": {"above": 0.9},
                    },
                ],
            },
            "nodes": [
                {
                    "id": "gpu_busy",
                    "title": TEXT,
                    "query": "max by ($target) (DCGM_FI_DEV_GPU_UTIL)",
                    "compare": {"above": 90},
                    "conclusion": cause("gpu_busy"),
                }
            ],
        }
    )
    source = FakeSource(answers={"ttft_gauge": samples(many(10, 1.0, **{"vllm-3": 5.0}))}, present={"ttft_gauge"})

    async def run() -> tuple[Diagnosis, Diagnosis]:
        evaluator = Looking(clock=lambda: AT).evaluator(source)
        return await evaluator.diagnose(tree, Scope(), AT), await diagnose_narrowed(evaluator, tree, Scope(), AT)

    whole, narrowed = asyncio.run(run())
    assert any(t.symptom_present is None for t in whole.targets)  # walked: vllm-3's memory unknown
    dcgm = [n for n in whole.notes if "dcgm-exporter" in n]
    assert len(dcgm) == 1
    assert [n for n in narrowed.notes if "dcgm-exporter" in n] == dcgm


def test_a_walk_redone_over_the_whole_scope_counts_every_query_sent() -> None:
    """A check answered without target labels: the narrowed walk is made again over the whole
    scope; the diagnosis says how many queries it sent."""
    source = FakeSource(
        answers={
            "ttft_gauge": samples(many(20, 1.0, **{"vllm-3": 5.0})),
            "kv_gauge": [Sample({}, 0.95)],
        }
    )

    async def run() -> Diagnosis:
        return await diagnose_narrowed(Looking(clock=lambda: AT).evaluator(source), fake_tree(), Scope(), AT)

    narrowed = asyncio.run(run())
    assert narrowed.fleet  # not vacuous: the walk was redone
    assert sum('pod=~"' in q for q, _ in source.queries) >= 1
    assert narrowed.queries == len(source.queries)


def test_more_walked_targets_than_max_choices_are_walked_in_their_namespace() -> None:
    """300 pods not clear (more than MAX_CHOICES): the pod label is left out of the narrowed
    scope, the namespace kept; each of them is still diagnosed as by the whole walk."""
    slow = many(310, 5.0, **{f"vllm-{i}": 1.0 for i in range(300, 310)})
    source = FakeSource(answers={"ttft_gauge": samples(slow), "kv_gauge": samples(many(310, 0.95))})

    async def run() -> tuple[Diagnosis, Diagnosis]:
        evaluator = Looking(clock=lambda: AT).evaluator(source)
        whole = await evaluator.diagnose(fake_tree(), Scope(), AT)
        source.queries.clear()
        return whole, await diagnose_narrowed(evaluator, fake_tree(), Scope(), AT)

    whole, narrowed = asyncio.run(run())
    assert sum(t.symptom_present is True for t in whole.targets) == 300
    kv = [q for q, _ in source.queries if "kv_gauge" in q]
    assert kv
    assert all("pod=~" not in q and 'namespace=~"prod|"' in q for q in kv)
    for mine, theirs in zip(narrowed.targets, whole.targets, strict=True):
        if theirs.symptom_present is not False:
            assert seen(mine) == seen(theirs)
        else:
            assert mine.checks == ()
