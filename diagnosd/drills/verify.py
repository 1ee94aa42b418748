"""Checks that scenarios make the shipped rules find what they promise, on one real Prometheus.

Every scenario's history (only the metrics the trees in question read) goes into one TSDB with
a `diagnosd_scenario` label that the evaluator treats as a strict scope label, so scenarios share
one time frame without seeing each other. Each expectation is then diagnosed through the real
rules at the anchor: its first cause must be a root cause of its target and the others shown
(root causes, or consequences under one), and, unless the scenario says otherwise, no other
target of that symptom may show the symptom. A scenario that expects nothing (a healthy fleet)
must show no symptom in any tree; one with `quiet_elsewhere` none in any tree it expects nothing of.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from diagnosd.daemon import compose
from diagnosd.drills import windows
from diagnosd.engine import Scope
from diagnosd.engine.params import effective
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import Diagnosis
from diagnosd.promlocal import LocalPrometheus, backfill, openmetrics
from diagnosd.sim.batch import Job, histories
from diagnosd.sim.history import Series as HistorySeries
from diagnosd.sim.history import as_series
from diagnosd.sim.scenario import Scenario
from diagnosd.sim.schedule import Schedule
from diagnosd.sim.simulator import current_names
from diagnosd.sources import PrometheusConfig
from diagnosd.trees import promql
from diagnosd.trees.model import Tree, queries

LABEL = "diagnosd_scenario"


@dataclass
class Finding:
    scenario: str
    symptom: str
    target: str
    problems: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def metric_names(tree: Tree, rules: compose.Rules) -> set[str]:
    """Every spelling of every metric a tree's queries read (aliases and colon/underscore twins)."""
    values = effective(tree)
    texts = [text for _, text in queries(tree)]
    names = {
        n for text in texts for n in promql.selector_names(promql.parse(promql.substitute(text, values, tree.target)))
    }
    return {v for name in names for v in rules.ruleset.aliases.variants(name)}


def verify(
    scenarios: Sequence[Scenario],
    rules: compose.Rules,
    *,
    anchor: float,
    seed: int = 0,
    workdir: Path | None = None,
    processes: int | None = None,
) -> list[Finding]:
    """Simulate every scenario, load them all into one Prometheus, judge each expectation."""
    with tempfile.TemporaryDirectory(prefix="diagnosd-verify-") as tmp:
        work = workdir or Path(tmp)
        tsdb = backfilled(scenarios, rules, work, anchor=anchor, seed=seed, parallel=processes != 1)
        with LocalPrometheus(work / "prometheus", tsdb=tsdb) as prom:
            return asyncio.run(evaluate(prom.url, scenarios, rules, anchor))


def backfilled(
    scenarios: Sequence[Scenario], rules: compose.Rules, work: Path, *, anchor: float, seed: int, parallel: bool = True
) -> Path:
    """Every scenario's history as the trees read it, backfilled into one TSDB under `work` (returned)."""
    jobs = [Job(s, names_for(s, rules), ((LABEL, s.name or "?"),)) for s in scenarios]
    batches = simulated(jobs, plan_for(scenarios, rules), anchor=anchor, seed=seed, parallel=parallel)
    return backfilled_series((as_series(series) for series in batches), work, "scenarios")


def simulated(
    jobs: Sequence[Job], plan: windows.Plan, *, anchor: float, seed: int, parallel: bool = True
) -> Iterator[HistorySeries]:
    """The jobs' histories where and as far back as `plan` says the trees read, one batch per job."""
    return histories(
        jobs,
        anchor=anchor,
        seed=seed,
        keep=keep_for(anchor, plan),
        parallel=parallel,
        history=plan.history,
        looks=plan.dense,
        far=(plan.far, plan.far_names),
    )


def backfilled_series(batches: Iterable[Iterable[openmetrics.Series]], work: Path, name: str) -> Path:
    """Every batch written to one OpenMetrics file under `work`, backfilled into `work/tsdb` (returned);
    the file is removed once the blocks are cut."""
    path = work / f"{name}.om"
    with path.open("w", encoding="utf-8") as out:
        for batch in batches:
            openmetrics.write(out, batch, end=False)
        out.write("# EOF\n")
    backfill(path, work / "tsdb")
    path.unlink()
    return work / "tsdb"


def names_for(scenario: Scenario, rules: compose.Rules) -> frozenset[str]:
    """Only what the trees in question read: a fraction of the fleet's series."""
    return frozenset(set().union(*(metric_names(t, rules) for t in trees_for(scenario, rules))))


def plan_for(scenarios: Iterable[Scenario], rules: compose.Rules) -> windows.Plan:
    """Where, and how far back, the trees these scenarios are judged by read."""
    trees = {tree.id: tree for s in scenarios for tree in trees_for(s, rules)}
    return spelled(windows.plan(windows.looks(trees.values())), rules)


def spelled(plan: windows.Plan, rules: compose.Rules) -> windows.Plan:
    """The plan with every spelling of the names the long looks read (as `metric_names`)."""
    variants = {v for name in plan.far_names for v in rules.ruleset.aliases.variants(name)}
    return replace(plan, far_names=frozenset(variants))


@dataclass(frozen=True)
class _Keep:
    """The windows the trees look at, and one sample an hour for the long ranges (a max over 7 d)."""

    schedule: Schedule

    def __call__(self, t: float) -> bool:
        dense = self.schedule.dense
        return any(start <= t <= end for start, end in dense) or (t - self.schedule.origin) % 3600.0 == 0.0


def keep_for(anchor: float, plan: windows.Plan) -> Callable[[float], bool]:
    """The ticks worth writing of a history simulated on `plan` (the simulation runs every tick)."""
    return _Keep(Schedule(anchor - plan.history, anchor, looks=plan.dense, far=plan.far))


def trees_for(scenario: Scenario, rules: compose.Rules) -> list[Tree]:
    # Every tree where nothing or (quiet_elsewhere) nothing else may show: judge() then requires
    # no symptom on each tree without an expectation.
    if not scenario.expect or scenario.quiet_elsewhere:
        return list(rules.ruleset.trees.values())
    symptoms = dict.fromkeys(e.symptom for e in scenario.expect)
    return [tree for s in symptoms if (tree := rules.ruleset.tree(s)) is not None]


async def evaluate(
    url: str, scenarios: Iterable[Scenario], rules: compose.Rules, anchor: float, *, narrowed: bool = False
) -> list[Finding]:
    """Judge every scenario's expectations on the Prometheus at `url` (holding `backfilled`).
    `narrowed`: each tree walked where its symptom is not clear, as rounds walk it."""
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(anchor, UTC)
    config = PrometheusConfig(url=url, timeout=60.0)
    out: list[Finding] = []
    limit = asyncio.Semaphore(4)
    async with compose.diagnoser(config, rules, strict_labels=[LABEL]) as diagnoser:

        async def one(scenario: Scenario, tree: Tree) -> list[Finding]:
            async with limit:
                scope = Scope.of({LABEL: scenario.name or "?"})
                looked = await diagnoser.diagnose(tree, scope, at, Trigger.CLI, narrowed=narrowed)
            finding = judge(scenario, tree, looked.diagnosis, anchor)
            for error in looked.errors:  # a query that failed is a broken drill, not an unknown to accept
                finding[0].problems.append(f"a query failed: {error}")
            return finding

        pairs = [(scenario, tree) for scenario in scenarios for tree in trees_for(scenario, rules)]
        for findings in await asyncio.gather(*(one(s, t) for s, t in pairs)):
            out.extend(findings)
    return out


def judge(scenario: Scenario, tree: Tree, diagnosis: Diagnosis, at: float) -> list[Finding]:
    from diagnosd.sim.fleet import layout

    assert scenario.fleet is not None
    fleet = layout(scenario.fleet)
    current = current_names(scenario, at, at)
    name = scenario.name or "?"
    expectations = [e for e in scenario.expect if e.symptom == tree.id]
    if not expectations:
        present = [_name(t.labels) for t in diagnosis.targets if t.symptom_present]
        finding = Finding(name, tree.id, "*")
        finding.problems += [f"{tree.id} present on {p} in a scenario that expects nothing of it" for p in present]
        return [finding]
    findings: list[Finding] = []
    wanted = [fleet.labels(e.target, current) for e in expectations]
    for expectation, labels in zip(expectations, wanted, strict=True):
        finding = Finding(name, tree.id, expectation.target)
        target = next((t for t in diagnosis.targets if _matches(t.labels, labels)), None)
        if target is None:
            seen = "; ".join(_name(t.labels) for t in diagnosis.targets) or "none"
            finding.problems.append(f"{_name(labels)} not diagnosed (targets: {seen})")
        else:
            finding.causes = [c.cause for c in target.root_causes]
            # The first cause is the scenario's own: a root cause. The others must be shown, as
            # root causes or as consequences under one (a cause another matched cause explains).
            shown = finding.causes + [c.cause for c in target.consequences]
            missing = [c for c in expectation.causes[:1] if c not in finding.causes]
            missing += [c for c in expectation.causes[1:] if c not in shown]
            if missing:
                finding.problems.append(_explain(target, missing))
            if not expectation.causes:  # the symptom, and no cause named
                if target.symptom_present is not True:
                    finding.problems.append(f"{_name(labels)}: symptom {target.symptom_present}, expected present")
                if finding.causes:
                    finding.problems.append(f"{_name(labels)}: root causes {', '.join(finding.causes)}, expected none")
        fleetwide = {f.finding.cause for f in diagnosis.fleet if f.finding is not None}
        finding.problems += [
            f"missing fleet-level finding {c} (fleet-level: {', '.join(sorted(fleetwide)) or 'none'})"
            for c in expectation.fleet
            if c not in fleetwide
        ]
        if expectation.isolated:
            others = [
                _name(t.labels)
                for t in diagnosis.targets
                if t.symptom_present and not any(_matches(t.labels, w) for w in wanted)
            ]
            finding.problems += [f"{tree.id} also present on {o} (the fault should stay on its target)" for o in others]
        findings.append(finding)
    return findings


def _matches(labels: object, wanted: dict[str, str]) -> bool:
    assert isinstance(labels, dict) or hasattr(labels, "items")
    return all(labels.get(k) == v for k, v in wanted.items())  # type: ignore[attr-defined]


def _name(labels: object) -> str:
    return " ".join(f"{k}={v}" for k, v in dict(labels).items() if k != LABEL)  # type: ignore[call-overload]


def _explain(target: object, missing: list[str]) -> str:
    from diagnosd.findings.model import TargetDiagnosis

    assert isinstance(target, TargetDiagnosis)
    causes = [c.cause for c in target.root_causes]
    detail = [
        f"missing {', '.join(missing)} (root causes: {', '.join(causes) or 'none'}; symptom {target.symptom_present}"
    ]
    e = target.detect.evidence
    if e is not None:
        detail.append(f"detect value={e.value} baseline={e.baseline}")
    for check in target.checks:
        if check.cause in missing or check.id in missing:
            ev = check.evidence
            numbers = f" value={ev.value} baseline={ev.baseline} threshold={ev.threshold}" if ev else ""
            detail.append(f"{check.id}: {check.verdict}{' ' + str(check.reason) if check.reason else ''}{numbers}")
    return "; ".join(detail) + ")"
