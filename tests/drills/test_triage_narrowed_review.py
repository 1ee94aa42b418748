"""Triage walks a present symptom's tree over its present targets alone: the board must not change.

The detect pass reads every target; the walk of a symptom present on some of them reads the scope
narrowed to those targets' values of the tree's target labels (engine/narrowed.py `walked_scope`).
A present target's walk must give the same verdicts, cause and numbers as the walk over the whole
scope: checks that compare a target with its peers or its model group read those through
`@unscoped` parts or through series the rewrite does not narrow (node, workload, autoscaler), and
a narrowing that cut them off would move a share, a max/min ratio or a canary-vs-stable delta.

Each fleet below injects a fault whose tree compares its target with others (the KV pool against
the model's traffic, a canary against its stable pods, a GPU against the pod's other GPUs, a
fallback group against the group it falls back to, a model's spend against every model's): the
fleets a narrowing that cut peers off would show first (a wider sample, SGLang's expert imbalance
and a quiet healthy day among them, agreed too; bench/triage_walk.py compares the two walks on
the harness' fleets of 10 and 1000 pods). The healthy fleets' boards are held empty by
tests/drills/test_triage_fleets.py, which walks them narrowed. The reference board walks over
the whole scope (`walked_scope` replaced by the identity); the narrowed walk's queries must carry
the present targets' values, or the comparison proves nothing.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Collection, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from diagnosd.daemon import compose
from diagnosd.drills import windows
from diagnosd.drills.verify import backfilled_series, metric_names, simulated, spelled
from diagnosd.engine import Scope
from diagnosd.engine import triage as triage_module
from diagnosd.engine.evaluator import Evaluator
from diagnosd.findings.model import CheckResult, Diagnosis, Evidence, RootCause, TargetDiagnosis
from diagnosd.findings.triage import Board, Hit
from diagnosd.promlocal import LocalPrometheus
from diagnosd.sim import scenario
from diagnosd.sim.batch import Job
from diagnosd.sim.history import as_series
from diagnosd.sources import PrometheusConfig
from diagnosd.trees.model import Tree
from tests.sim.conftest import ANCHOR

pytestmark = pytest.mark.slow

AT = datetime.fromtimestamp(ANCHOR, UTC)
# Fault fleets whose trees compare a target with peers or groups, and a quiet healthy day.
FLEETS = (
    "kv_pool_full",  # queue_backlog / memory_high_qps_low: the HPA join is @unscoped
    "canary_kv_fp8",  # canary_regression: canary against stable pods of one model_name
    "gpu_memory_skew",  # expert_imbalance on a TP=2 pod: its GPUs against each other
    "fallback_target_overloaded",  # fallback_frequent: the group fallen back to is another model_group
    "expensive_model_routing",  # cost_increase: a model's share of every model's calls and spend
)
# Where a fault fleet must show something, so that the comparison is over a real walk.
EXPECTED_PRESENT = {
    "kv_pool_full": "queue_backlog",
    "canary_kv_fp8": "canary_regression",
    "gpu_memory_skew": "expert_imbalance",
    "fallback_target_overloaded": "fallback_frequent",
    "expensive_model_routing": "cost_increase",
}
# Float noise of one aggregation summed over fewer series in another order, nothing more.
REL = 1e-9
REGEX_SPECIAL = set(r"\.+*?()|[]{}^$")


@pytest.fixture(scope="module")
def fleets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Each fleet's day of history backfilled into its own Prometheus: name -> URL."""
    rules = compose.load()
    names = frozenset().union(*(metric_names(tree, rules) for tree in rules.ruleset.trees.values()))
    plan = spelled(windows.plan(windows.looks(rules.ruleset.trees.values())), rules)
    work = tmp_path_factory.mktemp("narrowed")
    with ExitStack() as stack:
        urls: dict[str, str] = {}
        for name in FLEETS:
            (work / name).mkdir()
            jobs = [Job(scenario.load(name), names, ())]
            batches = simulated(jobs, plan, anchor=ANCHOR, seed=0, parallel=False)
            tsdb = backfilled_series((as_series(series) for series in batches), work / name, name)
            prom = stack.enter_context(LocalPrometheus(work / name / "prometheus", tsdb=tsdb))
            urls[name] = prom.url
        yield urls


@dataclass
class Run:
    board: Board
    # Every PromQL text sent, detect and walk passes alike.
    queries: list[str] = field(default_factory=list)
    # Per walk: the present targets' labels and the scope the walk was given.
    walks: list[tuple[list[dict[str, str]], Scope]] = field(default_factory=list)
    # Per walked tree: every target the walk judged, by its labels (the board keeps the top cause
    # only; a check further down the tree that moved must show too).
    walked: dict[str, dict[tuple[tuple[str, str], ...], TargetDiagnosis]] = field(default_factory=dict)


def _run(url: str, monkeypatch: pytest.MonkeyPatch, *, narrowed: bool) -> Run:
    queries: list[str] = []
    walks: list[tuple[list[dict[str, str]], Scope]] = []
    walked_targets: dict[str, dict[tuple[tuple[str, str], ...], TargetDiagnosis]] = {}
    original = triage_module.walked_scope
    diagnose = Evaluator.diagnose

    async def recorded(self: Evaluator, tree: Tree, *args: Any, **kwargs: Any) -> Diagnosis:
        found = await diagnose(self, tree, *args, **kwargs)
        if tree.nodes:  # the walk; the detect pass runs the tree without its checks
            walked_targets[tree.id] = {tuple(sorted(t.labels.items())): t for t in found.targets}
        return found

    def walked(scope: Scope, matched: Sequence[TargetDiagnosis], strict: Collection[str] = ()) -> Scope:
        given = original(scope, matched, strict) if narrowed else scope
        walks.append(([dict(t.labels) for t in matched], given))
        return given

    class Recording(triage_module._Recorder):
        async def query(self, promql: str, at: datetime) -> list[Any]:
            queries.append(promql)
            return await super().query(promql, at)

    async def go() -> Board:
        config = PrometheusConfig(url=url, timeout=60.0)
        async with compose.diagnoser(config, compose.load()) as diagnoser:
            return await diagnoser.triage(Scope(), AT)

    with monkeypatch.context() as patch:
        patch.setattr(triage_module, "walked_scope", walked)
        patch.setattr(triage_module, "_Recorder", Recording)
        patch.setattr(Evaluator, "diagnose", recorded)
        board = asyncio.run(go())
    return Run(board, queries, walks, walked_targets)


@pytest.fixture(scope="module")
def runs(fleets: dict[str, str]) -> Iterator[dict[str, tuple[Run, Run]]]:
    """Per fleet: (narrowed, whole-scope reference), each triaged once."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        yield {
            name: (_run(url, monkeypatch, narrowed=True), _run(url, monkeypatch, narrowed=False))
            for name, url in fleets.items()
        }


def _number(value: float | None) -> object:
    if value is None or math.isnan(value):
        return repr(value)
    return pytest.approx(value, rel=REL, abs=1e-12)


def _evidence(e: Evidence | None) -> object:
    """What a verdict rests on, the query text aside (the narrowed one carries the regex)."""
    if e is None:
        return None
    return {
        "check": e.check,
        "operator": e.operator,
        "threshold": _number(e.threshold),
        "value": _number(e.value),
        "baseline": _number(e.baseline),
        "baseline_at": e.baseline_at,
        "current": _number(e.current),
        "context": {k: _number(v) for k, v in sorted(e.context.items())},
        "verdict": e.verdict,
        "reason": e.reason,
        "conditions": [_evidence(c) for c in e.conditions],
    }


def _cause(c: RootCause | None) -> object:
    if c is None:
        return None
    return {
        "cause": c.cause,
        "severity": c.severity,
        "check": c.check,
        "depth": c.depth,
        "excess": _number(c.excess),
        "evidence": [_evidence(e) for e in c.evidence],
        "explained_by": c.explained_by,
        "explains": [_cause(x) for x in c.explains],
    }


def _check(c: CheckResult) -> object:
    return {"id": c.id, "verdict": c.verdict, "reason": c.reason, "evidence": _evidence(c.evidence)}


def _target(t: TargetDiagnosis) -> object:
    return {
        "present": t.symptom_present,
        "root_causes": [_cause(c) for c in t.root_causes],
        "consequences": [_cause(c) for c in t.consequences],
        "possible_causes": [_cause(c) for c in t.possible_causes],
        "checks": [_check(c) for c in t.checks],
    }


def _hit(h: Hit) -> object:
    return {
        "labels": dict(h.labels),
        "detect": (h.detect.verdict, h.detect.reason, _evidence(h.detect.evidence)),
        "cause": _cause(h.cause),
        "evidence": _evidence(h.evidence),
    }


def _present(board: Board) -> list[tuple[str, list[object]]]:
    """Present symptoms in board order, each with its hits in their order."""
    return [(p.symptom, [_hit(h) for h in p.hits]) for p in board.present]


@pytest.mark.parametrize("name", FLEETS)
def test_the_narrowed_walk_gives_the_board_of_the_whole_scope(runs: dict[str, tuple[Run, Run]], name: str) -> None:
    narrowed, whole = runs[name]
    got, want = _present(narrowed.board), _present(whole.board)
    # Symptom by symptom first: a difference names where it is.
    assert [s for s, _ in got] == [s for s, _ in want]
    for (symptom, hits), (_, expected) in zip(got, want, strict=True):
        assert hits == expected, symptom
    # The detect pass is the same in both: what is clear or unknown cannot move.
    assert [c.symptom for c in narrowed.board.clear] == [c.symptom for c in whole.board.clear]
    assert [(u.symptom, u.reasons) for u in narrowed.board.unknown] == [
        (u.symptom, u.reasons) for u in whole.board.unknown
    ]
    assert [(p.symptom, p.unseen, p.seen, p.queries) for p in narrowed.board.present] == [
        (p.symptom, p.unseen, p.seen, p.queries) for p in whole.board.present
    ]


@pytest.mark.parametrize("name", FLEETS)
def test_every_check_of_a_present_target_is_judged_alike(runs: dict[str, tuple[Run, Run]], name: str) -> None:
    """Beyond the top cause: each check's verdict and numbers, consequences and possible causes."""
    narrowed, whole = runs[name]
    assert set(narrowed.walked) == set(whole.walked) == {p.symptom for p in narrowed.board.present}
    for present in narrowed.board.present:
        for hit in present.hits:
            key = tuple(sorted(hit.labels.items()))
            assert key in narrowed.walked[present.symptom], (present.symptom, key)
            got = _target(narrowed.walked[present.symptom][key])
            want = _target(whole.walked[present.symptom][key])
            assert got == want, (present.symptom, key)


@pytest.mark.parametrize("name", FLEETS)
def test_the_walks_read_the_present_targets_alone(runs: dict[str, tuple[Run, Run]], name: str) -> None:
    """Every walk's scope names exactly its present targets' values, and its queries carry them:
    otherwise the board comparison above would hold because nothing was narrowed."""
    narrowed, whole = runs[name]
    if name in EXPECTED_PRESENT:
        assert EXPECTED_PRESENT[name] in [p.symptom for p in narrowed.board.present]
    assert len(narrowed.walks) == len(narrowed.board.present)
    assert all(scope == Scope() for _, scope in whole.walks)
    for targets, scope in narrowed.walks:
        wanted = {label: {t[label] for t in targets} for label in targets[0] if all(t.get(label) for t in targets)}
        assert dict(scope.values()) == {label: tuple(sorted(values)) for label, values in wanted.items()}
        for label, values in scope.values():
            # Lenient (no strict labels configured): `label=~"a|b|"`, the empty value for series without it.
            literal = _lenient(label, values)
            assert any(literal in q for q in narrowed.queries), literal
            assert not any(literal in q for q in whole.queries), literal


def test_some_walk_narrows_a_label_to_several_values(runs: dict[str, tuple[Run, Run]]) -> None:
    """A symptom present on several targets: the walk reads a regex of their values, not one."""
    several = [(targets, scope.choices) for run, _ in runs.values() for targets, scope in run.walks if scope.choices]
    assert several


def test_a_pod_walk_reads_the_present_pods_only(runs: dict[str, tuple[Run, Run]]) -> None:
    """On the demo fault the walk of its backlog names its pod, and the whole-scope walk names none."""
    narrowed, whole = runs["kv_pool_full"]
    (present,) = [p for p in narrowed.board.present if p.symptom == "queue_backlog"]
    pods = sorted(h.labels["pod"] for h in present.hits)
    scoped = [q for q in narrowed.queries if _names_pods(q, pods)]
    assert scoped
    assert not [q for q in whole.queries if _names_pods(q, pods)]


def _names_pods(query: str, pods: Sequence[str]) -> bool:
    return _lenient("pod", pods) in query


def _lenient(label: str, values: Sequence[str]) -> str:
    """A lenient scope matcher as the rewrite prints it: any of the values, or the label missing."""
    regex = "|".join("".join("\\" + ch if ch in REGEX_SPECIAL else ch for ch in v) for v in sorted(values))
    return f"{label}=~{json.dumps(regex + '|', ensure_ascii=False)}"
