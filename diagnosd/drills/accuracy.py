"""Accuracy of the shipped trees over a matrix of scenarios × cluster variations, on one Prometheus.

Each case is a scenario with a variation mix (diagnosd/sim/variations.py). Every scenario is
simulated once; each of its cases gets the variation applied to a copy of its series and its own
value of verify's isolation label, so all cases share one TSDB without seeing each other. Each
case is then diagnosed through the real rules, and judged the way diagnosd/drills/verify.py judges a
scenario, plus what a benchmark needs: the rank of the expected first cause among the root
causes, whether the engine could not look (unknown), the top cause when it is not one the
scenario expects (wrong), and, on the healthy fleets, any root cause at all (a false cause).

The naive baseline, computed in the same run where asked: for each symptom, every cause's own
check query (the first condition of an all / any) now against the same query at four moments a
day earlier; the cause whose value moved most (z-score, or relative change when the four agree)
is its answer. It knows the tree's metrics but none of its structure or thresholds.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from diagnosd.daemon import compose
from diagnosd.drills import windows
from diagnosd.drills.verify import LABEL, backfilled_series, judge, names_for, simulated, spelled, trees_for
from diagnosd.engine import Scope
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import Diagnosis, TargetDiagnosis, Verdict
from diagnosd.promlocal import LocalPrometheus, openmetrics
from diagnosd.sim.batch import Job
from diagnosd.sim.fleet import layout
from diagnosd.sim.history import Series as HistorySeries
from diagnosd.sim.history import as_series
from diagnosd.sim.scenario import Expectation, Scenario
from diagnosd.sim.simulator import current_names
from diagnosd.sim.variations import Cluster, Mix, draw, relabel
from diagnosd.sources import PrometheusConfig
from diagnosd.trees.model import CheckNode, Compare, Tree, leaves, walk

DAY = 86400.0
# Where the naive baseline reads "a day ago" (the simulator ticks densely there for it).
BASELINE_MINUTES = (-45, -30, -15, 0)


@dataclass(frozen=True)
class Case:
    id: str  # the isolation label's value
    base: str  # the scenario simulated
    scenario: Scenario  # named `id`
    variation: Mix
    # A case missing an exporter has a twin with the same variation and every exporter: what the
    # missing exporter changed is the difference between the two. The twin is not scored.
    twin_of: str | None = None


@dataclass
class Outcome:
    """One expectation of a fault case, or one tree of a healthy case (target "*")."""

    case: Case
    symptom: str
    target: str
    expected: str | None = None
    causes: list[str] = field(default_factory=list)  # root causes in rank order (healthy: all targets')
    rank: int | None = None  # of the expected first cause among `causes`, 0-based
    unknown: bool = False
    off_top: str | None = None  # the top cause, where the scenario does not expect it
    # Of a case missing an exporter: a top cause the scenario does not expect and the twin with every
    # exporter does not find (an explaining cause gone unknown leaves a consequence on top, say).
    wrong: str | None = None
    problems: list[str] = field(default_factory=list)  # verify's judgement
    naive: list[str] = field(default_factory=list)  # the baseline's causes, biggest move first

    @property
    def healthy(self) -> bool:
        return self.expected is None


def cases(
    scenarios: Iterable[Scenario],
    per_case: Mapping[str, int] | int,
    *,
    seed: int,
    intervals: Sequence[float] = (15.0, 30.0, 60.0),
) -> list[Case]:
    """Each scenario × its number of variations (drawn per run seed, scenario and index)."""
    out: list[Case] = []
    for s in scenarios:
        base = s.name or "?"
        count = per_case if isinstance(per_case, int) else per_case.get(base, 1)
        for k in range(count):
            case_id = f"{base}.v{k}"
            mix = draw(seed, base, k, intervals=intervals)
            out.append(Case(case_id, base, s.model_copy(update={"name": case_id}), mix))
            if mix.missing and s.expect:
                twin = f"{case_id}.all"
                out.append(Case(twin, base, s.model_copy(update={"name": twin}), mix.without_missing, case_id))
    return out


def _wrong(outcomes: list[Outcome]) -> list[Outcome]:
    """Judge each missing-exporter case against its twin; drop the twins."""
    twins = {(o.case.twin_of, o.symptom, o.target): o for o in outcomes if o.case.twin_of}
    scored = [o for o in outcomes if not o.case.twin_of]
    for o in scored:
        twin = twins.get((o.case.id, o.symptom, o.target))
        if twin is not None and o.off_top and o.off_top not in twin.causes:
            o.wrong = o.off_top
    return scored


def run(
    matrix: Sequence[Case],
    rules: compose.Rules,
    *,
    anchor: float,
    seed: int = 0,
    naive: bool = False,
    workdir: Path | None = None,
) -> list[Outcome]:
    """Simulate every scenario once, write each case's variation, load one Prometheus, judge."""
    bases = {c.base: c.scenario.model_copy(update={"name": c.base}) for c in matrix}
    by_base: dict[str, list[Case]] = {}
    for c in matrix:
        by_base.setdefault(c.base, []).append(c)
    jobs = [Job(s, names_for(s, rules), ((LABEL, name),)) for name, s in bases.items()]
    plan = plan_for(matrix, rules, naive)

    def varied(series: HistorySeries) -> Iterator[Iterator[openmetrics.Series]]:
        if not series:
            return
        base = dict(next(iter(series))[1])[LABEL]
        for c in by_base[base]:
            yield as_series(relabel(c.variation.apply(series, _cluster(c.scenario)), LABEL, c.id))

    with tempfile.TemporaryDirectory(prefix="diagnosd-accuracy-") as tmp:
        work = workdir or Path(tmp)
        batches = simulated(jobs, plan, anchor=anchor, seed=seed)
        tsdb = backfilled_series((one for series in batches for one in varied(series)), work, "matrix")
        with LocalPrometheus(work / "prometheus", tsdb=tsdb) as prom:
            return _wrong(asyncio.run(_evaluate(prom.url, matrix, rules, anchor, naive)))


def plan_for(matrix: Sequence[Case], rules: compose.Rules, naive: bool) -> windows.Plan:
    """Where the trees of these cases read, and with `naive` the flat trees at the baseline's moments."""
    trees = {tree.id: tree for c in matrix for tree in trees_for(c.scenario, rules)}
    found = windows.looks(trees.values())
    if naive:
        flat = [_flat(tree) for tree in trees.values()]
        found = windows.joined(found, *(windows.looks(flat, at=DAY - m * 60.0) for m in BASELINE_MINUTES))
    return spelled(windows.plan(found), rules)


def _cluster(scenario: Scenario) -> Cluster:
    assert scenario.fleet is not None
    return Cluster({p.node: p.node_ip for p in layout(scenario.fleet).pods})


async def _evaluate(
    url: str, matrix: Sequence[Case], rules: compose.Rules, anchor: float, naive: bool
) -> list[Outcome]:
    at = datetime.fromtimestamp(anchor, UTC)
    config = PrometheusConfig(url=url, timeout=120.0)
    limit = asyncio.Semaphore(6)
    async with compose.diagnoser(config, rules, strict_labels=[LABEL]) as diagnoser:

        async def diagnose(tree: Tree, case: Case, when: datetime) -> Diagnosis:
            async with limit:
                looked = await diagnoser.diagnose(tree, Scope.of({LABEL: case.id}), when, Trigger.CLI)
            return looked.diagnosis

        async def one(case: Case, tree: Tree) -> list[Outcome]:
            diagnosis = await diagnose(tree, case, at)
            outcomes = outcomes_of(case, tree, diagnosis, anchor)
            # The baseline names a cause where one is expected: not on the trees a quiet_elsewhere
            # scenario expects nothing of (target "*"), nor where it expects no cause.
            if naive and any(o.expected is not None for o in outcomes):
                flat = _flat(tree)
                moments = [at] + [datetime.fromtimestamp(anchor - DAY + m * 60.0, UTC) for m in BASELINE_MINUTES]
                now, *before = await asyncio.gather(*(diagnose(flat, case, m) for m in moments))
                for o in outcomes:
                    if o.expected is not None:
                        o.naive = _naive(case.scenario, o.target, now, before, anchor)
            return outcomes

        pairs = [(c, t) for c in matrix for t in trees_for(c.scenario, rules)]
        results = await asyncio.gather(*(one(c, t) for c, t in pairs))
    return [o for group in results for o in group]


def outcomes_of(case: Case, tree: Tree, diagnosis: Diagnosis, anchor: float) -> list[Outcome]:
    """verify's judgement of one tree's diagnosis of a case, with ranks, unknowns and wrong causes."""
    findings = judge(case.scenario, tree, diagnosis, anchor)
    expectations = [e for e in case.scenario.expect if e.symptom == tree.id]
    if not expectations:
        causes = [c.cause for t in diagnosis.targets for c in t.root_causes]
        # A tree with no target here (no pod started within the hour, no canary) has nothing to
        # judge; unknown is a target whose symptom could not be established.
        unknown = any(t.symptom_present is None for t in diagnosis.targets)
        return [Outcome(case, tree.id, "*", causes=causes, unknown=unknown, problems=findings[0].problems)]
    out = []
    for expectation, finding in zip(expectations, findings, strict=True):
        target = _target(case.scenario, diagnosis, expectation.target, anchor)
        # `causes: []` expects no root cause: scored like a healthy target (any cause is false).
        expected = expectation.causes[0] if expectation.causes else None
        o = Outcome(case, tree.id, expectation.target, expected, problems=finding.problems)
        if target is not None:
            o.causes = [c.cause for c in target.root_causes]
        if o.expected is None:
            o.unknown = target is None or target.symptom_present is None
        elif o.expected in o.causes:
            o.rank = o.causes.index(o.expected)
        elif target is None or _could_not_look(target, expectation):
            o.unknown = True
        if o.expected is not None and o.causes and o.causes[0] not in expectation.causes:
            o.off_top = o.causes[0]
        out.append(o)
    return out


def _target(scenario: Scenario, diagnosis: Diagnosis, target: str, anchor: float) -> TargetDiagnosis | None:
    assert scenario.fleet is not None
    wanted = layout(scenario.fleet).labels(target, current_names(scenario, anchor, anchor))
    return next((t for t in diagnosis.targets if all(t.labels.get(k) == v for k, v in wanted.items())), None)


def _could_not_look(target: TargetDiagnosis, expectation: Expectation) -> bool:
    """The expected cause is not matched because something on its way was unknown: the symptom, its
    own check, or a check above it (whose children are then skipped)."""
    if target.symptom_present is None:
        return True
    checks = {c.id: c for c in target.checks}
    node = next((c for c in target.checks if c.cause == expectation.causes[0]), None)
    while node is not None:
        if node.verdict is Verdict.UNKNOWN:
            return True
        node = checks.get(node.parent) if node.parent else None
    return False


# --------------------------------------------------------------------------- naive baseline

_FLAT: dict[str, Tree] = {}
NEVER_FAILS = Compare(above=-1e300)  # the flat check only reads its value: every answer matches


def _flat(tree: Tree) -> Tree:
    """The tree's causes side by side, each reading its own check's (first) query, no gates."""
    found = _FLAT.get(tree.id)
    if found is None:
        checks: list[CheckNode] = []
        for node, _ in walk(list(tree.nodes)):
            if isinstance(node, CheckNode) and node.conclusion is not None:
                _, leaf = leaves(node.id, node)[0]
                checks.append(
                    node.model_copy(
                        update={
                            "query": leaf.query,
                            "compare": NEVER_FAILS,
                            "unit": leaf.unit,
                            "value_label": leaf.value_label,
                            "absent_as_zero": leaf.absent_as_zero,
                            "sustained": None,
                            "all": None,
                            "any": None,
                            "needs_traffic": False,
                            "context": [],
                            "children": [],
                        }
                    )
                )
        found = _FLAT[tree.id] = tree.model_copy(update={"nodes": checks, "traffic": None})
    return found


def _values(scenario: Scenario, diagnosis: Diagnosis, target: str, anchor: float) -> dict[str, float]:
    found = _target(scenario, diagnosis, target, anchor)
    if found is None:
        return {}
    return {
        c.cause: c.evidence.value
        for c in found.checks
        if c.cause and c.evidence is not None and c.evidence.value is not None and math.isfinite(c.evidence.value)
    }


def _naive(scenario: Scenario, target: str, now: Diagnosis, before: Sequence[Diagnosis], anchor: float) -> list[str]:
    """Causes by how far their value moved from a day ago, biggest first (never moved: left out)."""
    current = _values(scenario, now, target, anchor)
    # A day ago the target may have had another pod name (replaced since): its own key then.
    past = [_values(scenario, d, target, anchor) for d in before]
    scores: dict[str, float] = {}
    for cause, value in current.items():
        history = [p[cause] for p in past if cause in p]
        scores[cause] = move(value, history)
    return [c for c, s in sorted(scores.items(), key=lambda kv: -kv[1]) if s > 0]


def move(value: float, history: Sequence[float]) -> float:
    """|z| of `value` against `history`; the relative change when history has no spread; nothing
    to compare with (the series is new since) is no evidence of a move."""
    if not history:
        return 0.0
    mean = statistics.fmean(history)
    spread = statistics.pstdev(history) if len(history) > 1 else 0.0
    if spread > 1e-9 * max(abs(mean), 1.0):
        return abs(value - mean) / spread
    if mean != 0:
        return abs(value - mean) / abs(mean)
    return 0.0 if value == 0 else math.inf


# --------------------------------------------------------------------------- scores


@dataclass(frozen=True)
class Score:
    """One tree's figures. Accuracy is scored where every exporter is there (a cause whose metrics
    are missing cannot be named, only left unknown); the cases missing one score "never wrong"."""

    tree: str
    expectations: int  # fault expectations with every exporter present
    at1: int
    at3: int
    naive_at1: int
    naive_at3: int
    degraded: int  # fault expectations with an exporter missing
    wrong: int  # of those: a top cause the scenario does not expect (and its twin does not find)
    unknown: int  # of every judged expectation and healthy pair: the engine could not look
    judged: int  # fault expectations and healthy (case, tree) pairs
    healthy: int
    false_causes: int


def scores(outcomes: Iterable[Outcome]) -> list[Score]:
    by_tree: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_tree.setdefault(o.symptom, []).append(o)
    out = []
    for tree, group in sorted(by_tree.items()):
        faults = [o for o in group if not o.healthy and not o.case.variation.missing]
        degraded = [o for o in group if not o.healthy and o.case.variation.missing]
        healthy = [o for o in group if o.healthy]
        out.append(
            Score(
                tree=tree,
                expectations=len(faults),
                at1=sum(o.rank == 0 for o in faults),
                at3=sum(o.rank is not None and o.rank < 3 for o in faults),
                naive_at1=sum(o.naive[:1] == [o.expected] for o in faults),
                naive_at3=sum(o.expected in o.naive[:3] for o in faults),
                degraded=len(degraded),
                wrong=sum(o.wrong is not None for o in degraded),
                unknown=sum(o.unknown for o in group),
                judged=len(group),
                healthy=len(healthy),
                false_causes=sum(bool(o.causes) for o in healthy),
            )
        )
    return out
