"""Triage: every symptom at once for the whole fleet, worst first. Pure: only the injected source.

One pass evaluates each tree's detect (and its baseline) as one vector over every target in scope;
then, only for the symptoms present on some target, the full tree is walked (vectorized, one query
per check) over those targets alone: the scope narrowed to the present targets' values of the
tree's target labels (a regex of them, as a coalesced batch of alerts is scoped), so that on a
fleet of 1000 pods with one in trouble the walk reads that pod, not the 1000. A target's walk is
the same narrowed or not: the rewrite narrows only the series that identify the target, never the
`@unscoped` parts a check compares it with (its peers, its model group) nor the node, workload or
autoscaler series it joins in (tests/engine/test_choices_real_prometheus.py holds every tree to
it). Past MAX_CHOICES present values of a label, that label is not narrowed. Either way the number
of queries depends on the trees, never on the number of targets.

A symptom is present (some target matched), clear (every target seen was ruled out), or not looked
at, with why: exporter absent, metric absent, no data, no baseline yet, query error, timeout,
Prometheus unreachable. A detect that compares with a baseline that has no value yet says "no
baseline yet" for that target, never clear.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from diagnosd.engine import params as P
from diagnosd.engine.evaluator import Looking
from diagnosd.engine.narrowed import detect_only, walked_scope
from diagnosd.engine.scope import Scope
from diagnosd.errors import QueryRejected, SourceError, SourceTimeout, SourceUnavailable
from diagnosd.findings import triage as T
from diagnosd.findings.model import Diagnosis, Reason, TargetDiagnosis
from diagnosd.sources.base import QuerySource, Sample, declared_types
from diagnosd.topology import Topology
from diagnosd.trees import families, promql
from diagnosd.trees.aliases import Aliases
from diagnosd.trees.model import Tree, leaves

Key = tuple[str, ...]
Params = Mapping[str, Mapping[str, float | str]]


class _Recorder:
    """One tree's view of the source: counts queries, keeps answers, errors and the names found."""

    def __init__(self, inner: QuerySource) -> None:
        self._inner = inner
        self.queries = 0
        self.answers: dict[tuple[str, datetime], list[Sample]] = {}
        self.errors: list[SourceError] = []
        self.present: set[str] = set()
        self.names_known = True

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.queries += 1
        try:
            samples = await self._inner.query(promql, at)
        except SourceError as error:
            self.errors.append(error)
            raise
        self.answers[(promql, at)] = samples
        return samples

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        try:
            found = await self._inner.metric_names(candidates, start, end, where)
        except QueryRejected:
            self.names_known = False
            raise
        except SourceError as error:
            self.errors.append(error)
            raise
        self.present |= found
        return found

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        return await declared_types(self._inner, names)


@dataclass
class _Look:
    """One tree's pass, before the board is assembled (exporter presence needs every tree's names)."""

    tree: Tree
    queries: int = 0
    targets: tuple[TargetDiagnosis, ...] = ()
    hits: tuple[T.Hit, ...] = ()
    unseen: list[tuple[str, str]] = field(default_factory=list)  # per unknown target: reason, detail
    failed: SourceError | None = None
    names: tuple[str, ...] = ()  # the detect's metrics, when no target could be seen
    absent: tuple[str, ...] = ()  # those of them absent on this Prometheus
    present_names: set[str] = field(default_factory=set)
    names_known: bool = True
    walk_failed: SourceError | None = None
    walk_partial: bool = False  # the walk ran, but some of its queries failed (those checks are unknown)
    baseline_missing: str | None = None  # how far back the empty baseline lies, when it is empty


async def triage(
    source: QuerySource,
    trees: Iterable[Tree],
    scope: Scope | None = None,
    at: datetime | None = None,
    *,
    looking: Looking | None = None,
    params: Params | None = None,
    concurrency: int = 4,
) -> T.Board:
    """The board for `scope` at `at` (default now). Raises the source's error when nothing at all
    could be looked at because Prometheus failed (unreachable first), never an empty board."""
    scope = scope or Scope()
    looking = looking or Looking()
    at = (at or looking.clock().replace(microsecond=0)).astimezone(UTC)
    params = params or {}
    limit = asyncio.Semaphore(concurrency)
    ordered = list(trees)

    async def one(tree: Tree) -> _Look:
        async with limit:
            return await _look(source, tree, scope, at, params.get(tree.id), looking)

    looks = await asyncio.gather(*(one(tree) for tree in ordered))
    board = _board(looks, scope, at)
    errors = [look.failed for look in looks if look.failed is not None]
    if board.blind and errors and len(errors) == len(looks):
        raise _worst(errors)
    return board


async def _look(
    source: QuerySource,
    tree: Tree,
    scope: Scope,
    at: datetime,
    overrides: Mapping[str, float | str] | None,
    looking: Looking,
) -> _Look:
    look = _Look(tree)
    recorder = _Recorder(source)
    evaluator = looking.evaluator(recorder)
    try:
        detected = await evaluator.diagnose(detect_only(tree), scope, at, overrides)
    except SourceError as error:
        look.failed = error
        return look
    finally:
        look.queries += recorder.queries
        look.present_names = recorder.present
        look.names_known = recorder.names_known
    look.targets = detected.targets
    if not detected.targets:
        if recorder.errors:
            look.failed = _worst(recorder.errors)
        else:
            look.names, look.absent = _absent(tree, overrides, looking.aliases, recorder, looking.topology)
            # The detect-only pass asks two things at most: now, and its baseline (at another time).
            past = [samples for (_, when), samples in recorder.answers.items() if when != at]
            if _has_baseline(tree) and past and not any(past):
                look.baseline_missing = promql.format_duration(at - min(w for (_, w) in recorder.answers if w != at))
        return look
    look.unseen = [_why(tree, t, recorder, at) for t in detected.targets if t.symptom_present is None]
    if look.unseen and all(reason == T.METRIC_ABSENT for reason, _ in look.unseen):
        # A compound detect sees targets through one condition while another's exporter is missing.
        look.names, look.absent = _absent(tree, overrides, looking.aliases, recorder, looking.topology)
    matched = [t for t in detected.targets if t.symptom_present is True]
    if not matched:
        return look
    walker = _Recorder(source)
    full: Diagnosis | None = None
    try:
        walk = looking.evaluator(walker)
        full = await walk.diagnose(tree, walked_scope(scope, matched, looking.strict_labels), at, overrides)
    except SourceError as error:
        look.walk_failed = error
    else:
        look.walk_failed = _worst(walker.errors) if walker.errors else None
        look.walk_partial = bool(walker.errors)
    finally:
        look.queries += walker.queries
    walked = {_key(tree, t.labels): t for t in full.targets} if full else {}
    look.hits = tuple(sorted((_hit(t, walked.get(_key(tree, t.labels))) for t in matched), key=_hit_order))
    return look


def _key(tree: Tree, labels: Mapping[str, str]) -> Key:
    return tuple(labels.get(label, "") for label in tree.target)


def _hit(detected: TargetDiagnosis, walked: TargetDiagnosis | None) -> T.Hit:
    target = walked if walked is not None and walked.symptom_present is True else detected
    cause = target.root_causes[0] if target.root_causes else None
    evidence = cause.evidence[-1] if cause is not None and cause.evidence else target.detect.evidence
    return T.Hit(labels=dict(target.labels), detect=target.detect, cause=cause, evidence=evidence)


def _hit_order(hit: T.Hit) -> tuple[int, list[tuple[str, ...]]]:
    return -T.SEVERITY_RANK[hit.severity], [_natural(value) for value in hit.labels.values()]


def _natural(value: str) -> tuple[str, ...]:
    """vllm-2 before vllm-10: digit runs compare as numbers (zero-padded), the rest as text."""
    return tuple(part.zfill(20) if part.isdigit() else part for part in re.split(r"(\d+)", value))


def _why(tree: Tree, target: TargetDiagnosis, recorder: _Recorder, at: datetime) -> tuple[str, str]:
    """Why this target's detect is unknown; a baseline with nothing for the target is "no baseline yet"."""
    detect = target.detect
    evidence = detect.evidence
    if _has_baseline(tree) and evidence is not None and evidence.baseline_at is not None:
        past = recorder.answers.get((evidence.query, evidence.baseline_at))
        if detect.reason is Reason.NO_BASELINE or (past is not None and not _has(past, tree, target.labels)):
            return T.NO_BASELINE, f"nothing {promql.format_duration(at - evidence.baseline_at)} ago to compare with"
    return str(detect.reason or T.NO_DATA), detect.detail or ""


def _has_baseline(tree: Tree) -> bool:
    """Whether any condition of the detect compares with a baseline."""
    return any(leaf.comparison()[1].baseline is not None for _, leaf in leaves("detect", tree.detect))


def _has(samples: Sequence[Sample], tree: Tree, labels: Mapping[str, str]) -> bool:
    for sample in samples:
        if all(sample.labels.get(label) == labels.get(label) for label in tree.target):
            return True
        if not any(label in sample.labels for label in tree.target):
            return True
    return False


def _absent(
    tree: Tree, overrides: Mapping[str, float | str] | None, aliases: Aliases, recorder: _Recorder, topology: Topology
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    values = P.effective(tree, overrides)
    texts = [
        promql.substitute(leaf.comparison()[0], values, tree.target, topology)
        for _, leaf in leaves("detect", tree.detect)
    ]
    names = tuple(dict.fromkeys(n for text in texts for n in promql.selector_names(promql.parse(text))))
    if not recorder.names_known:
        return names, ()
    return names, tuple(n for n in names if not any(v in recorder.present for v in aliases.variants(n)))


def _worst(errors: Sequence[SourceError]) -> SourceError:
    for kind in (SourceUnavailable, SourceTimeout):
        for error in errors:
            if isinstance(error, kind):
                return error
    return errors[0]


def _error_reason(error: SourceError) -> T.Unseen:
    if isinstance(error, SourceUnavailable):
        return T.Unseen(T.UNREACHABLE, error.detail)
    if isinstance(error, SourceTimeout):
        return T.Unseen(T.TIMEOUT, error.detail)
    return T.Unseen(T.QUERY_ERROR, error.detail)


def _exporter(name: str) -> str | None:
    """The exporter family publishing a name; a pod runs one engine, so vLLM and SGLang count as one."""
    found = families.family(name)
    if found is families.OTHER:
        return None
    return "/".join(f.name for f in families.FAMILIES if f.name == found.name or f.name in found.alternatives)


def _absence(look: _Look, everywhere: set[str]) -> T.Unseen:
    """Why no target has a detect value: an exporter with no series here, metrics absent, or no data."""
    names, absent = look.names, look.absent
    if not absent and look.baseline_missing is not None:
        return T.Unseen(T.NO_BASELINE, f"nothing {look.baseline_missing} ago to compare with, and no value now")
    if not absent:
        why = "no target has a value now"
        return T.Unseen(T.NO_DATA, why if look.names_known else f"{why} (metric name discovery unsupported)")
    seen = {e for name in everywhere if (e := _exporter(name)) is not None}
    missing = [e for e in dict.fromkeys(_exporter(name) for name in absent) if e is not None and e not in seen]
    if missing:
        needed = [name for name in absent if _exporter(name) in missing]
        return T.Unseen(T.EXPORTER_ABSENT, f"no {' or '.join(missing)} series on this Prometheus ({_names(needed)})")
    if len(absent) == len(names):
        return T.Unseen(T.METRIC_ABSENT, f"not on this Prometheus: {_names(absent)}")
    if look.baseline_missing is not None:
        return T.Unseen(T.NO_BASELINE, f"nothing {look.baseline_missing} ago to compare with, and no value now")
    return T.Unseen(T.NO_DATA, f"no target has a value now (not on this Prometheus: {_names(absent)})")


def _names(names: Sequence[str], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most} more"


def _grouped(reasons: Iterable[tuple[str, str]]) -> tuple[T.Unseen, ...]:
    counts: dict[str, tuple[str, int]] = {}
    for reason, detail in reasons:
        first, count = counts.get(reason, (detail, 0))
        counts[reason] = (first, count + 1)
    return tuple(T.Unseen(reason, detail, count) for reason, (detail, count) in counts.items())


def _shared_causes(present: Sequence[T.Present]) -> Callable[[T.Present], int]:
    """For a present symptom: how many present symptoms name the same top cause on one of its targets."""
    count: dict[tuple[tuple[tuple[str, str], ...], str], int] = {}
    for p in present:
        for key in {(tuple(sorted(h.labels.items())), h.cause.cause) for h in p.hits if h.cause}:
            count[key] = count.get(key, 0) + 1

    def shared(p: T.Present) -> int:
        return max((count[(tuple(sorted(h.labels.items())), h.cause.cause)] for h in p.hits if h.cause), default=0)

    return shared


def _board(looks: Sequence[_Look], scope: Scope, at: datetime) -> T.Board:
    everywhere = set().union(*(look.present_names for look in looks))
    present: list[T.Present] = []
    clear: list[T.Clear] = []
    unknown: list[T.Unknown] = []
    seen: set[tuple[tuple[str, str], ...]] = set()
    for look in looks:
        tree = look.tree
        seen.update(tuple(sorted(t.labels.items())) for t in look.targets)
        unseen = _grouped(look.unseen)
        if look.hits:
            if look.walk_failed is not None:
                failed = _error_reason(look.walk_failed)
                what = "some checks could not run" if look.walk_partial else "the tree walk failed"
                unseen += (T.Unseen(failed.reason, f"{what}: {failed.detail}", len(look.hits)),)
            present.append(
                T.Present(tree.id, tree.title, tuple(tree.target), look.hits, unseen, look.queries, len(look.targets))
            )
        elif look.failed is not None:
            unknown.append(T.Unknown(tree.id, tree.title, (_error_reason(look.failed),)))
        elif not look.targets:
            unknown.append(T.Unknown(tree.id, tree.title, (_absence(look, everywhere),)))
        elif unseen:
            cleared = sum(t.symptom_present is False for t in look.targets)
            if look.absent and (absence := _absence(look, everywhere)).reason == T.EXPORTER_ABSENT:
                unseen = (replace(absence, targets=len(look.unseen)),)
            unknown.append(T.Unknown(tree.id, tree.title, unseen, cleared))
        else:
            clear.append(T.Clear(tree.id, tree.title, len(look.targets)))
    shared = _shared_causes(present)
    # Worst first; among equals, a cause several symptoms of one target share leads (it is what to
    # fix: a full KV pool shows as a backlog and as memory high with QPS low), then the symptom
    # seen on more targets; the rest keep the seed's order (stable sort), not the alphabet.
    present.sort(key=lambda p: (-T.SEVERITY_RANK[p.severity], -shared(p), -len(p.hits)))
    return T.Board(
        evaluated_at=at,
        scope=scope.as_dict(),
        present=tuple(present),
        clear=tuple(clear),
        unknown=tuple(unknown),
        queries=sum(look.queries for look in looks),
        targets=len(seen),
    )
