"""Evaluates a tree for a scope at a time: every distinct query once, concurrently, for all targets.

The only outside contact is the injected QuerySource; the cost of a diagnosis grows with the
number of checks, never with the number of targets (each query returns a vector over all of them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from diagnosd.engine import params as P
from diagnosd.engine.judge import Answer, Key, Question
from diagnosd.engine.rewrite import ScopeMatcher, rewrite
from diagnosd.engine.scope import Scope
from diagnosd.engine.walk import diagnose_target, explanations
from diagnosd.errors import QueryRejected, SourceError
from diagnosd.findings.model import Diagnosis, NodeKind
from diagnosd.sources.base import QuerySource, Sample, warnings_of
from diagnosd.trees import promql
from diagnosd.trees.aliases import Aliases
from diagnosd.trees.families import absent_notes, probes
from diagnosd.trees.model import CheckNode, Compare, Text, Tree, walk

Job = tuple[str, datetime]


@dataclass(frozen=True)
class Resolved:
    query: str
    absent: tuple[str, ...]
    all_absent: bool


class Evaluator:
    def __init__(
        self,
        source: QuerySource,
        aliases: Aliases | None = None,
        *,
        concurrency: int = 8,
        strict_labels: Iterable[str] = (),
        lookback: timedelta = timedelta(hours=1),
    ) -> None:
        self.source = source
        self.aliases = aliases or Aliases()
        self.concurrency = concurrency
        # Labels every series in scope carries, matched exactly; every other scope label matches
        # series that carry it with that value and lets through series without it.
        self.strict_labels = frozenset(strict_labels)
        self.lookback = lookback

    async def diagnose(
        self,
        tree: Tree,
        scope: Scope | None = None,
        at: datetime | None = None,
        overrides: Mapping[str, float | str] | None = None,
    ) -> Diagnosis:
        scope = scope or Scope()
        at = (at or datetime.now(UTC)).astimezone(UTC)
        values = P.effective(tree, overrides)
        texts = _texts(tree, values)
        offsets = _offsets(tree, values)
        start = at - max(offsets.values(), default=timedelta(0)) - self.lookback
        spellings, notes = await self._spellings(texts.values(), start, at)
        matchers = self._matchers(tree, scope)
        resolved = {key: self._resolve(text, spellings, matchers, tree.target) for key, text in texts.items()}
        jobs = _jobs(resolved, offsets, at)
        answers = await self._run(jobs, tree.target)
        questions = _questions(tree, values, resolved, offsets, answers, at)
        targets = _targets(tree, resolved, answers, at, scope)
        traffic = None
        if tree.traffic is not None:
            traffic = (answers[(resolved["traffic"].query, at)], P.number(tree.traffic.min, values))
        contexts = {
            node.id: [(c.id, answers[(resolved[f"{node.id}.{c.id}"].query, at)]) for c in node.context]
            for node, _ in walk(list(tree.nodes))
            if isinstance(node, CheckNode)
        }
        explains = explanations(tree, values)
        results = tuple(diagnose_target(tree, key, questions, traffic, contexts, explains) for key in targets)
        notes.extend(_partial_notes(jobs, answers))
        return Diagnosis(
            symptom=tree.id,
            title=tree.title,
            evaluated_at=at,
            scope=scope.as_dict(),
            target_labels=tuple(tree.target),
            targets=results,
            queries=len(jobs),
            notes=tuple(notes),
        )

    async def _spellings(
        self, texts: Iterable[str], start: datetime, end: datetime
    ) -> tuple[dict[str, list[str]], list[str]]:
        names = sorted({name for text in texts for name in promql.selector_names(promql.parse(text))})
        candidates = {name: self.aliases.variants(name) for name in names}
        everything = {v for variants in candidates.values() for v in variants}
        try:
            present = await self.source.metric_names(everything, start, end)
        except QueryRejected as error:
            # A backend without match[] on label values: query the names as written.
            return {n: [n] for n in names}, [
                f"metric name discovery unsupported ({error.detail}); names used as written"
            ]
        spellings = {name: [v for v in variants if v in present] for name, variants in candidates.items()}
        # One note per exporter family none of whose names exists in any spelling (SGLang is not
        # absent where vLLM is there); a single missing name shows on the checks that need it.
        seen: set[str] = set()
        if asked := probes(candidates, present):
            try:
                seen = set(await self.source.metric_names(asked, start, end))
            except QueryRejected:
                seen = set()
        return spellings, absent_notes(candidates, present, seen=seen)

    def _matchers(self, tree: Tree, scope: Scope) -> list[ScopeMatcher]:
        # Lenient even for target labels: node_exporter series have no namespace, HPA series no pod,
        # and they still join into a pod's checks. Targets are filtered by the scope afterwards.
        return [ScopeMatcher(label, value, label in self.strict_labels) for label, value in scope.pairs]

    def _resolve(
        self, text: str, spellings: Mapping[str, list[str]], matchers: list[ScopeMatcher], target: Sequence[str] = ()
    ) -> Resolved:
        names = promql.selector_names(promql.parse(text))
        absent = tuple(n for n in names if not spellings.get(n))
        # Newest spelling first: where a target has several, the rewrite keeps the first one's answer.
        present = {n: self._newest_first(n, spellings[n]) for n in names if spellings.get(n)}
        query = rewrite(text, present, matchers, target)
        return Resolved(query, absent, bool(names) and len(absent) == len(names))

    def _newest_first(self, name: str, found: list[str]) -> list[str]:
        order = {spelling: rank for rank, spelling in enumerate(self.aliases.newest_first(name))}
        return sorted(found, key=lambda s: order.get(s, len(order)))

    async def _run(self, jobs: set[Job], target: list[str]) -> dict[Job, Answer]:
        limit = asyncio.Semaphore(self.concurrency)

        async def one(job: Job) -> tuple[Job, Answer]:
            async with limit:
                try:
                    samples = await self.source.query(*job)
                except SourceError as error:
                    return job, Answer(error=error)
            return job, _answer(samples, target)

        return dict(await asyncio.gather(*(one(job) for job in sorted(jobs, key=lambda j: (j[1], j[0])))))


def _texts(tree: Tree, values: P.Params) -> dict[str, str]:
    """Every query of the tree with params substituted, by the key of what asks it."""
    out = {"detect": promql.substitute(tree.detect.query, values, tree.target)}
    if tree.traffic is not None:
        out["traffic"] = promql.substitute(tree.traffic.query, values, tree.target)
    for node, _ in walk(list(tree.nodes)):
        if isinstance(node, CheckNode):
            out[node.id] = promql.substitute(node.query, values, tree.target)
            for context in node.context:
                out[f"{node.id}.{context.id}"] = promql.substitute(context.query, values, tree.target)
    return out


def _compares(tree: Tree) -> dict[str, Compare]:
    out = {"detect": tree.detect.compare}
    out.update({node.id: node.compare for node, _ in walk(list(tree.nodes)) if isinstance(node, CheckNode)})
    return out


def _offsets(tree: Tree, values: P.Params) -> dict[str, timedelta]:
    return {key: P.duration(c.baseline, values) for key, c in _compares(tree).items() if c.baseline is not None}


def _jobs(resolved: Mapping[str, Resolved], offsets: Mapping[str, timedelta], at: datetime) -> set[Job]:
    jobs = {(r.query, at) for r in resolved.values()}
    jobs |= {(resolved[key].query, at - offset) for key, offset in offsets.items()}
    return jobs


def _answer(samples: list[Sample], target: list[str]) -> Answer:
    by_target: dict[Key, list[Sample]] = {}
    everywhere: list[Sample] = []
    for sample in samples:
        if all(label in sample.labels for label in target):
            by_target.setdefault(tuple(sample.labels[label] for label in target), []).append(sample)
        elif not any(label in sample.labels for label in target):
            everywhere.append(sample)
    return Answer(by_target=by_target, everywhere=everywhere, warnings=warnings_of(samples))


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


def _questions(
    tree: Tree,
    values: P.Params,
    resolved: Mapping[str, Resolved],
    offsets: Mapping[str, timedelta],
    answers: Mapping[Job, Answer],
    at: datetime,
) -> dict[str, Question]:
    nodes: list[tuple[str, NodeKind, Text, Compare, CheckNode | None, str | None]] = [
        ("detect", NodeKind.DETECT, tree.detect.title, tree.detect.compare, None, tree.detect.unit)
    ]
    nodes += [
        (n.id, NodeKind.CHECK, n.title, n.compare, n, n.unit)
        for n, _ in walk(list(tree.nodes))
        if isinstance(n, CheckNode)
    ]
    out: dict[str, Question] = {}
    for key, kind, title, compare, check, unit in nodes:
        r = resolved[key]
        baseline_at = at - offsets[key] if key in offsets else None
        raw = check.query if check else tree.detect.query
        out[key] = Question(
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
            value_label=check.value_label if check else None,
            absent_as_zero=check.absent_as_zero if check else False,
            unit=unit,
            assumed=P.assumed_in(f"{raw} {compare.threshold}", tree, values),
        )
    return out


def _targets(
    tree: Tree, resolved: Mapping[str, Resolved], answers: Mapping[Job, Answer], at: datetime, scope: Scope
) -> list[Key]:
    """Targets are what the symptom's own query sees; failing that, anything any check saw."""
    detect = answers[(resolved["detect"].query, at)]
    keys = set(detect.by_target)
    if not keys:
        keys = {k for (_, when), answer in answers.items() if when == at for k in answer.by_target}
    wanted = {i: value for i, label in enumerate(tree.target) for name, value in scope.pairs if name == label}
    return sorted(k for k in keys if all(k[i] == value for i, value in wanted.items()))
