"""Evaluates a tree for a scope at a time: every distinct query once, concurrently, for all targets.

The only outside contact is the injected QuerySource; the number of queries of a diagnosis grows
with the number of checks, never with the number of targets (each query returns a vector over all
of them). Each check is judged as soon as its own answers are in (engine/early.py), and a fleet's
walk runs in slices, so that judging 1000 targets neither waits for the slowest query nor holds
the event loop in one piece.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from diagnosd.engine import params as P
from diagnosd.engine.early import Asker, EarlyJudge, steps
from diagnosd.engine.fleet import fleet_results
from diagnosd.engine.judge import Answer, Key, Question
from diagnosd.engine.rewrite import ScopeMatcher, Shape, fill, strict_matcher, template
from diagnosd.engine.scope import Scope
from diagnosd.engine.walk import Shared, diagnose_target, explanations, severities
from diagnosd.errors import QueryRejected, SourceError
from diagnosd.findings.model import Diagnosis, NodeKind
from diagnosd.moments import Clock, utc_now
from diagnosd.sources.base import QuerySource, Sample, declared_types, warnings_of
from diagnosd.topology import DEFAULT as DEFAULT_TOPOLOGY
from diagnosd.topology import Topology
from diagnosd.trees import promql
from diagnosd.trees.aliases import Aliases
from diagnosd.trees.families import absent_notes, probes
from diagnosd.trees.model import CheckNode, Compare, Conditional, Text, Tree, comparisons, queries, walk

Job = tuple[str, datetime]
# Targets walked between two turns of the event loop.
WALK_SLICE = 50


@dataclass(frozen=True)
class Resolved:
    query: str
    absent: tuple[str, ...]
    all_absent: bool
    # Names whose absence leaves the query without its data (promql.missing_source).
    unsourced: tuple[str, ...] = ()


@dataclass(frozen=True)
class Looking:
    """How a diagnosis looks, the same for every driver: the one factory of Evaluators (the
    Diagnoser, triage's passes, the CLI, `rules test`, the drills and the benchmarks all build
    theirs here, so they resolve names, scope and time alike)."""

    aliases: Aliases = field(default_factory=Aliases)
    strict_labels: frozenset[str] = frozenset()
    topology: Topology = DEFAULT_TOPOLOGY
    clock: Clock = utc_now
    # When the Prometheus asked started keeping data, where a driver knows it (triage does).
    history_start: datetime | None = None

    def evaluator(self, source: QuerySource) -> Evaluator:
        return Evaluator(
            source,
            self.aliases,
            strict_labels=self.strict_labels,
            history_start=self.history_start,
            topology=self.topology,
            clock=self.clock,
        )


class Evaluator:
    def __init__(
        self,
        source: QuerySource,
        aliases: Aliases | None = None,
        *,
        concurrency: int = 8,
        strict_labels: Iterable[str] = (),
        lookback: timedelta = timedelta(hours=1),
        history_start: datetime | None = None,
        topology: Topology = DEFAULT_TOPOLOGY,
        clock: Clock = utc_now,
    ) -> None:
        self.source = source
        # What "now" is when a diagnosis names no time (the daemon injects its own).
        self.clock = clock
        self.aliases = aliases or Aliases()
        self.concurrency = concurrency
        # Labels every series in scope carries, matched exactly; every other scope label matches
        # series that carry it with that value and lets through series without it.
        self.strict_labels = frozenset(strict_labels)
        self.lookback = lookback
        # When the Prometheus asked started keeping data (a TSDB made minutes ago): a query whose
        # window reaches before it is unknown (short history), not judged on a partial window.
        self.history_start = history_start
        # The deployment conventions the topology recipes read (how a canary is told apart).
        self.topology = topology

    async def diagnose(
        self,
        tree: Tree,
        scope: Scope | None = None,
        at: datetime | None = None,
        overrides: Mapping[str, float | str] | None = None,
    ) -> Diagnosis:
        scope = scope or Scope()
        at = (at or self.clock()).astimezone(UTC)
        values = P.effective(tree, overrides)
        texts = _texts(tree, values, self.topology)
        offsets = _offsets(tree, values)
        start = at - max(offsets.values(), default=timedelta(0)) - self.lookback
        matchers = self._matchers(tree, scope)
        # Names are found where the scope's strict labels hold (one cluster of a shared store: an
        # exporter missing there is missing, whatever another cluster has).
        where = [strict_matcher(m) for m in matchers if m.strict]
        spellings, notes = await self._spellings(texts.values(), start, at, where)
        resolved: dict[str, Resolved] = {}
        for asker, text in texts.items():
            resolved[asker] = self._resolve(text, spellings, matchers, tree.target)
            # A text not resolved before (parsed and rewritten: a few ms each) holds the event
            # loop: the webhook and the other diagnoses are served between two.
            await asyncio.sleep(0)
        jobs = _jobs(resolved, offsets, at)
        ask = _asker(tree, values, resolved, offsets, at)
        early = EarlyJudge(steps(tree, lambda check: _jobs_of(check, resolved, offsets, at)), ask)
        answers = await self._run(jobs, tree.target, at, early)
        asked = {step.id: ask(step.id, answers) for step in early.steps}
        questions = {check: question for check, (question, _) in asked.items()}
        contexts = {check: context for check, (_, context) in asked.items()}
        targets = _targets(tree, resolved, answers, at, scope)
        traffic = None
        if tree.traffic is not None:
            traffic = (answers[(resolved["traffic"].query, at)], P.number(tree.traffic.min, values))
        explains, causes = explanations(tree, values), severities(tree)
        results, shared = [], Shared(early.judged)
        for done, key in enumerate(targets, 1):
            results.append(diagnose_target(tree, key, questions, traffic, contexts, explains, causes, shared))
            if done % WALK_SLICE == 0:
                await asyncio.sleep(0)  # a fleet's walk in slices: the event loop serves in between
        fleet = fleet_results(tree, questions, contexts)
        notes.extend(_partial_notes(jobs, answers))
        return Diagnosis(
            symptom=tree.id,
            title=tree.title,
            evaluated_at=at,
            scope=scope.as_dict(),
            target_labels=tuple(tree.target),
            targets=tuple(results),
            queries=len(jobs),
            notes=tuple(notes),
            fleet=fleet,
        )

    def _young(self, job: Job, answer: Answer, at: datetime) -> Answer:
        """A current answer whose window reaches before the history Prometheus holds, marked so."""
        if self.history_start is None:
            return answer
        query, when = job
        # Whole seconds: "holds 9s", not "9s600ms".
        held = timedelta(seconds=int(max(at - self.history_start, timedelta(0)).total_seconds()))
        needs = _reach_of(query)
        if when == at and needs > held:
            span = promql.format_duration
            why = f"Prometheus holds {span(held)} of history; this query reads {span(needs)}"
            return replace(answer, short_history=why)
        return answer

    async def _spellings(
        self, texts: Iterable[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> tuple[dict[str, list[str]], list[str]]:
        names = sorted({name for text in texts for name in _names_in(text)})
        candidates = {name: self.aliases.variants(name) for name in names}
        everything = {v for variants in candidates.values() for v in variants}
        try:
            present = await self.source.metric_names(everything, start, end, where)
        except QueryRejected as error:
            # A backend without match[] on label values: query the names as written.
            return {n: [n] for n in names}, [
                f"metric name discovery unsupported ({error.detail}); names used as written"
            ]
        spellings = {name: [v for v in variants if v in present] for name, variants in candidates.items()}
        declared = await self._declared(candidates, spellings, end)
        for name, found in declared.items():
            spellings[name] = found
        known = set(present) | {v for found in declared.values() for v in found}
        # One note per exporter family none of whose names exists in any spelling (SGLang is not
        # absent where vLLM is there); a single missing name shows on the checks that need it.
        seen: set[str] = set()
        if asked := probes(candidates, known):
            try:
                seen = set(await self.source.metric_names(asked, start, end, where))
            except QueryRejected:
                seen = set()
        notes = absent_notes(candidates, known, seen=seen)
        if declared:
            spelled = ", ".join(sorted({v for found in declared.values() for v in found}))
            notes.append(
                f"counters declared by the targets' metadata with no series yet (no events, counted as 0 "
                f"where a check says absent_as_zero): {spelled}"
            )
        return spellings, notes

    async def _declared(
        self, candidates: Mapping[str, Sequence[str]], spellings: Mapping[str, list[str]], end: datetime
    ) -> dict[str, list[str]]:
        """Names without series whose family a target declares as a counter: no events yet, not absent.

        Exporters create a labelled counter's series at its first event (LiteLLM's failure,
        fallback and cooldown counters) but expose its `# TYPE` from the start, and Prometheus
        keeps that metadata for its active targets. Metadata describes now, so it is asked only
        for a diagnosis within `lookback` of now; a post-mortem keeps such names absent.
        """
        missing = {name: variants for name, variants in candidates.items() if not spellings.get(name)}
        if not missing or self.clock() - end > self.lookback:
            return {}
        types = await declared_types(self.source, {v for variants in missing.values() for v in variants})
        if not types:
            return {}
        out: dict[str, list[str]] = {}
        for name, variants in missing.items():
            found = [v for v in variants if types.get(v) == "counter"]
            if found:
                out[name] = found
        return out

    def _matchers(self, tree: Tree, scope: Scope) -> list[ScopeMatcher]:
        # Lenient even for target labels: a GPU series without a pod, an engine series without
        # model_name still join into a pod's checks. The rewrite puts lenient matchers only on
        # series that identify the target (never node, workload or autoscaler series, nor
        # `@unscoped` parts; diagnosd/topology); strict ones everywhere. Targets are filtered by
        # the scope afterwards.
        return [ScopeMatcher(label, values, label in self.strict_labels) for label, values in scope.values()]

    def _resolve(
        self, text: str, spellings: Mapping[str, list[str]], matchers: list[ScopeMatcher], target: Sequence[str] = ()
    ) -> Resolved:
        known = tuple(sorted((name, tuple(found)) for name, found in spellings.items()))
        shapes = tuple(m.shape for m in matchers)
        resolved = _resolved(text, known, shapes, tuple(target), self.aliases)
        return replace(resolved, query=fill(resolved.query, matchers))

    async def _run(self, jobs: set[Job], target: list[str], at: datetime, early: EarlyJudge) -> dict[Job, Answer]:
        """Every request, at most `concurrency` at once; each check is judged as its answers arrive."""
        limit = asyncio.Semaphore(self.concurrency)

        async def one(job: Job) -> tuple[Job, Answer]:
            async with limit:
                try:
                    samples = await self.source.query(*job)
                except SourceError as error:
                    return job, Answer(error=error)
            return job, _answer(samples, target)

        # Created in a fixed order: the semaphore lets them through in it.
        tasks = [asyncio.ensure_future(one(job)) for job in sorted(jobs, key=lambda j: (j[1], j[0]))]
        pending: set[asyncio.Future[tuple[Job, Answer]]] = set(tasks)
        answers: dict[Job, Answer] = {}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    job, answer = task.result()
                    answers[job] = self._young(job, answer, at)
                while (step := early.ready(answers)) is not None:
                    # A check at a time, a slice of targets at a time: the answers still coming
                    # (and whatever else the loop serves) are read in between.
                    for _ in early.judge(step, answers):
                        await asyncio.sleep(0)
                    await asyncio.sleep(0)
        finally:
            for task in pending:
                task.cancel()
            await _ended(tasks)
        return answers


async def _ended(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Returns once every task has ended: raised or cancelled, a diagnosis returns only when each
    of its requests has closed its connection, and with their failures retrieved (none left for
    the loop to report). A cancellation that comes meanwhile is not passed on to them (that would
    cut their closing short): it is raised once they have ended."""
    interrupted = False
    while not all(task.done() for task in tasks):
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            interrupted = True
    for task in tasks:
        if not task.cancelled():
            task.exception()
    if interrupted:
        raise asyncio.CancelledError


def _texts(tree: Tree, values: P.Params, topology: Topology) -> dict[str, str]:
    """Every query of the tree with params substituted, by the key of what asks it.

    A sustained comparison asks two: its quantile over the window (judged) and, as `key~now`,
    the plain value now (shown beside it).
    """
    compared = dict(comparisons(tree))
    known = tuple(sorted(values.items()))
    target = tuple(tree.target)
    out: dict[str, str] = {}
    for key, query in queries(tree):
        leaf = compared.get(key)
        if leaf is not None and leaf.sustained is not None:
            out[key] = _substituted(sustained_query(leaf, values), known, target, topology)
            out[f"{key}~now"] = _substituted(query, known, target, topology)
        else:
            out[key] = _substituted(query, known, target, topology)
    return out


@functools.lru_cache(maxsize=4096)
def _substituted(
    text: str, values: tuple[tuple[str, float | str], ...], target: tuple[str, ...], topology: Topology
) -> str:
    return promql.substitute(text, dict(values), list(target), topology)


def sustained_query(leaf: Conditional, values: P.Params) -> str:
    """The query a comparison is judged on: a sustained one becomes a quantile over its window.

    Held above T in `share` of the steps means the (1 - share) quantile is above T (below: the
    share quantile below T); one noisy dip moves a quantile a little, a minimum all the way.
    """
    query, compare = leaf.comparison()
    if leaf.sustained is None:
        return query
    share = P.number(leaf.sustained.share, values)
    q = 1 - share if compare.operator.endswith("above") else share
    window = f"{leaf.sustained.for_}:{leaf.sustained.step}"
    return f"quantile_over_time({promql.render_value(round(q, 6))}, ({query})[{window}])"


def _compares(tree: Tree) -> dict[str, Compare]:
    return {key: leaf.comparison()[1] for key, leaf in comparisons(tree)}


def _offsets(tree: Tree, values: P.Params) -> dict[str, timedelta]:
    return {key: P.duration(c.baseline, values) for key, c in _compares(tree).items() if c.baseline is not None}


def _jobs(resolved: Mapping[str, Resolved], offsets: Mapping[str, timedelta], at: datetime) -> set[Job]:
    jobs = {(r.query, at) for r in resolved.values()}
    jobs |= {(resolved[key].query, at - offset) for key, offset in offsets.items()}
    return jobs


def _answer(samples: list[Sample], target: list[str]) -> Answer:
    """Samples by target key; those without any target label are fleet-level, kept apart.

    A sample with only some of the target labels names no target and is dropped.
    """
    by_target: dict[Key, list[Sample]] = {}
    fleet: list[Sample] = []
    for sample in samples:
        if all(label in sample.labels for label in target):
            by_target.setdefault(tuple(sample.labels[label] for label in target), []).append(sample)
        elif not any(label in sample.labels for label in target):
            fleet.append(sample)
    return Answer(by_target=by_target, fleet=fleet, warnings=warnings_of(samples))


def _partial_notes(jobs: set[Job], answers: Mapping[Job, Answer]) -> list[str]:
    """One note per warning of a partial answer: the diagnosis is then not complete."""
    seen: dict[str, int] = {}
    for job in sorted(jobs, key=lambda j: (j[1], j[0])):
        for warning in answers[job].warnings:
            seen[warning] = seen.get(warning, 0) + 1
    return [
        f"partial answer from the backend ({count} quer{'y' if count == 1 else 'ies'}): {warning}; "
        "checks judged from it are never clear"
        for warning, count in seen.items()
    ]


def _asker(
    tree: Tree,
    values: P.Params,
    resolved: Mapping[str, Resolved],
    offsets: Mapping[str, timedelta],
    at: datetime,
) -> Asker:
    """Builds a check's question and context answers ("detect" or a check node's id) from the answers."""
    checks = {node.id: node for node, _ in walk(list(tree.nodes)) if isinstance(node, CheckNode)}

    def leaf(key: str, kind: NodeKind, title: Text, item: Conditional, answers: Mapping[Job, Answer]) -> Question:
        r = resolved[key]
        raw, compare = item.comparison()
        baseline_at = at - offsets[key] if key in offsets else None
        sustained = item.sustained
        return Question(
            id=key,
            kind=kind,
            title=title,
            query=r.query,
            compare=compare,
            threshold=P.number(compare.threshold, values),
            now=answers[(r.query, at)],
            baseline=answers[(r.query, baseline_at)] if baseline_at else None,
            baseline_at=baseline_at,
            absent=r.absent,
            all_absent=r.all_absent,
            unsourced=r.unsourced,
            value_label=item.value_label,
            absent_as_zero=item.absent_as_zero,
            unit=item.unit,
            assumed=P.assumed_in(f"{raw} {compare.threshold}", tree, values),
            sustained=None if sustained is None else (_for(sustained.for_, values), P.number(sustained.share, values)),
            current=answers[(resolved[f"{key}~now"].query, at)] if sustained is not None else None,
        )

    def question(key: str, kind: NodeKind, title: Text, item: Conditional, answers: Mapping[Job, Answer]) -> Question:
        if item.combine is None:
            return leaf(key, kind, title, item, answers)
        parts = tuple(question(f"{key}/{c.id}", NodeKind.CHECK, c.title, c, answers) for c in item.conditions)
        # The node's headline numbers are its first condition's; its verdict combines them all.
        return replace(parts[0], id=key, kind=kind, title=title, combine=item.combine, conditions=parts)

    def ask(check: str, answers: Mapping[Job, Answer]) -> tuple[Question, list[tuple[str, Answer]]]:
        if check == "detect":
            asked = question("detect", NodeKind.DETECT, tree.detect.title, tree.detect, answers)
            context = tree.detect.context
        else:
            node = checks[check]
            asked, context = question(check, NodeKind.CHECK, node.title, node, answers), node.context
        return asked, [(c.id, answers[(resolved[f"{check}.{c.id}"].query, at)]) for c in context]

    return ask


def _jobs_of(check: str, resolved: Mapping[str, Resolved], offsets: Mapping[str, timedelta], at: datetime) -> set[Job]:
    """The requests one check ("detect" or a node's id) reads: its comparisons (`check/condition`),
    their baselines and current values (`~now`), and its context values (`check.name`)."""
    own = [k for k in resolved if k == check or (k.startswith(check) and k[len(check)] in "/.~")]
    jobs = {(resolved[k].query, at) for k in own}
    return jobs | {(resolved[k].query, at - offsets[k]) for k in own if k in offsets}


def _for(raw: str, values: P.Params) -> str:
    return str(values[raw[1:]]) if raw.startswith("$") else raw


def _targets(
    tree: Tree, resolved: Mapping[str, Resolved], answers: Mapping[Job, Answer], at: datetime, scope: Scope
) -> list[Key]:
    """Targets are what the symptom's own query sees; failing that, anything a check saw (the
    detect's metrics may be absent where the checks' are not). Context values and the traffic
    floor only decorate a target: they name none (an image-pull time exists for every pod, not
    only for the new ones a cold start is about)."""
    detect = [answers[(r.query, at)] for key, r in resolved.items() if key == "detect" or key.startswith("detect/")]
    keys = {k for answer in detect for k in answer.by_target}
    if not keys:
        compared = {key for key, _ in comparisons(tree)}
        checked = {r.query for key, r in resolved.items() if key in compared}
        keys = {
            k for (query, when), answer in answers.items() if when == at and query in checked for k in answer.by_target
        }
    if not keys and any(answer.short_history is not None for answer in detect):
        # A TSDB younger than the detect's window: whatever answered names the targets, so each
        # reads "not enough history yet" instead of the fleet reading "no target".
        keys = {k for (_, when), answer in answers.items() if when == at for k in answer.by_target}
    wanted = {i: set(values) for i, label in enumerate(tree.target) for name, values in scope.values() if name == label}
    return sorted(k for k in keys if all(k[i] in values for i, values in wanted.items()))


# Parsing and rewriting is most of a diagnosis's own CPU time, and every round asks the same texts
# with the same spellings and scope: remember the answers (all immutable), bounded. Remembered by
# the scope's shape, not its values (the query a template, filled by the caller): a storm's alerts,
# each on a pod of its own, are diagnosed without parsing any query again.
@functools.lru_cache(maxsize=4096)
def _resolved(
    text: str,
    known: tuple[tuple[str, tuple[str, ...]], ...],
    shapes: tuple[Shape, ...],
    target: tuple[str, ...],
    aliases: Aliases,
) -> Resolved:
    spellings = dict(known)
    expr = promql.parse(text)
    names = promql.selector_names(expr)
    # A recipe's join sources are alternatives (kube_node_info or kube_pod_info...): absent
    # only when all of them are; the rule's own names decide whether everything is absent.
    joins = promql.join_names(expr)
    own = [n for n in names if n not in joins]
    missing = [n for n in names if not spellings.get(n)]
    if any(spellings.get(n) for n in joins):
        missing = [n for n in missing if n not in joins]
    absent = tuple(missing)
    decisive = own or names
    all_absent = bool(decisive) and all(not spellings.get(n) for n in decisive)
    joined = any(spellings.get(n) for n in joins)
    unsourced = promql.missing_source(expr, lambda n: bool(spellings.get(n)) or (joined and n in joins))
    # Newest spelling first: where a target has several, the rewrite keeps the first one's answer.
    present = {n: _newest_first(aliases, n, list(spellings[n])) for n in names if spellings.get(n)}
    return Resolved(template(text, present, shapes, target), absent, all_absent, tuple(unsourced))


def _newest_first(aliases: Aliases, name: str, found: list[str]) -> list[str]:
    order = {spelling: rank for rank, spelling in enumerate(aliases.newest_first(name))}
    return sorted(found, key=lambda s: order.get(s, len(order)))


@functools.lru_cache(maxsize=4096)
def _names_in(text: str) -> tuple[str, ...]:
    return tuple(promql.selector_names(promql.parse(text)))


@functools.lru_cache(maxsize=4096)
def _reach_of(query: str) -> timedelta:
    return promql.reach(promql.parse(query))
