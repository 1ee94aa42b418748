"""Turns query answers into verdicts for one target: pure functions, no I/O.

Health and verdict stay apart: an answer that could not be had is `unknown` with its reason,
never `clear`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property, lru_cache
from typing import Any

import promql_parser as pp

from diagnosd.errors import SourceError, SourceTimeout
from diagnosd.findings.model import CheckResult, Evidence, NodeKind, Reason, Verdict
from diagnosd.sources.base import Sample
from diagnosd.trees import promql
from diagnosd.trees.model import Compare, Text

Key = tuple[str, ...]


@dataclass(frozen=True)
class Answer:
    """One query's outcome at one time: samples by target key, or the error that prevented it."""

    by_target: Mapping[Key, list[Sample]] = field(default_factory=dict)
    # Samples without any target label (a `sum` over everything, a node or cluster series): a
    # fleet-level fact. Never applied to a target: an idle GPU somewhere is no model's root cause.
    fleet: list[Sample] = field(default_factory=list)
    error: SourceError | None = None
    # The backend's warnings: the answer is partial (Thanos / Mimir with a store missing).
    warnings: tuple[str, ...] = ()
    # Set when the query reads further back than Prometheus holds history: what it read is partial.
    short_history: str | None = None

    def samples(self, key: Key) -> list[Sample]:
        """This target's samples; never the fleet-level ones (those have no target to belong to)."""
        return list(self.by_target.get(key, []))

    @property
    def fleet_level(self) -> bool:
        """Only samples without target labels: one fleet-wide value, judged once, not per target."""
        return self.error is None and not self.by_target and bool(self.fleet)

    def as_fleet(self) -> Answer:
        """The fleet-level samples as the answer for the empty key `()`: how a fleet result is judged."""
        return replace(self, by_target={(): list(self.fleet)} if self.fleet else {}, fleet=[])


@dataclass(frozen=True)
class Question:
    """A compiled comparison: the rewritten query, its threshold and where its baseline lies."""

    id: str
    kind: NodeKind
    title: Text
    query: str
    compare: Compare
    threshold: float
    now: Answer
    baseline: Answer | None = None
    baseline_at: datetime | None = None
    absent: tuple[str, ...] = ()
    all_absent: bool = False
    # Names without which the query has no data at all: then a missing sample is no zero.
    unsourced: tuple[str, ...] = ()
    value_label: str | None = None
    absent_as_zero: bool = False
    unit: str | None = None
    assumed: Mapping[str, float | str] = field(default_factory=dict)
    # all / any of `conditions` (then the fields above repeat the first condition's).
    combine: str | None = None
    conditions: tuple[Question, ...] = ()
    # Sustained: the query is a quantile over `sustained[0]` held in share `sustained[1]`;
    # `current` answers the plain value now, shown beside it.
    sustained: tuple[str, float] | None = None
    current: Answer | None = None

    @cached_property
    def operator(self) -> str:
        # compare.operator, found once: it is read for every target the question is judged on.
        return self.compare.operator


@dataclass(frozen=True, slots=True)
class Judged:
    verdict: Verdict
    reason: Reason | None = None
    detail: str | None = None
    evidence: Evidence | None = None
    excess: float = 0.0


def judge(question: Question, key: Key, context: Mapping[str, float | None] | None = None) -> Judged:
    if question.conditions:
        return _combine(question, [judge(c, key) for c in question.conditions], context)
    judged = _judge(question, key, context)
    warnings = question.now.warnings + (question.baseline.warnings if question.baseline is not None else ())
    return _partial(judged, tuple(dict.fromkeys(warnings))) if warnings else judged


def _combine(question: Question, parts: Sequence[Judged], context: Mapping[str, float | None] | None) -> Judged:
    """all: matched when every part is, clear when any is; any: the reverse; else unknown.

    An unknown part never turns into clear: it leaves the whole unknown unless another part decides.
    """
    any_ = question.combine == "any"
    decides, follows = (Verdict.MATCHED, Verdict.CLEAR) if any_ else (Verdict.CLEAR, Verdict.MATCHED)
    verdicts = [p.verdict for p in parts]
    evidences = tuple(
        p.evidence.evolve(title=c.title, verdict=p.verdict, reason=p.reason, detail=p.detail)
        for c, p in zip(question.conditions, parts, strict=True)
        if p.evidence is not None
    )
    head = evidences[0] if evidences else None
    warnings = tuple(dict.fromkeys(w for e in evidences for w in e.warnings))
    evidence = (
        head.evolve(
            title=None,
            verdict=None,
            reason=None,
            detail=None,
            check=question.id,
            combine=question.combine,
            conditions=evidences,
            context=context or {},
            warnings=warnings,
        )
        if head is not None
        else None
    )
    if decides in verdicts:
        deciding = [p.excess for p in parts if p.verdict is decides]
        excess = max(deciding) if decides is Verdict.MATCHED else 0.0
        return Judged(decides, evidence=evidence, excess=excess)
    if all(v is follows for v in verdicts):
        # all matched: as strong as its first condition (the measurement; the rest gate it).
        excess = parts[0].excess if follows is Verdict.MATCHED else 0.0
        return Judged(follows, evidence=evidence, excess=excess)
    open_ = [(c, p) for c, p in zip(question.conditions, parts, strict=True) if p.verdict not in (decides, follows)]
    detail = "; ".join(f"{c.id.rsplit('/', 1)[-1]}: {p.detail or p.reason or p.verdict}" for c, p in open_)
    return Judged(Verdict.UNKNOWN, open_[0][1].reason, detail, evidence)


def _partial(judged: Judged, warnings: tuple[str, ...]) -> Judged:
    """A partial answer can show a problem, never rule one out: clear becomes unknown (partial)."""
    said = "partial answer: " + "; ".join(warnings)
    evidence = judged.evidence.evolve(warnings=warnings) if judged.evidence is not None else None
    if judged.verdict is Verdict.CLEAR:
        return Judged(Verdict.UNKNOWN, Reason.PARTIAL, f"{said} (what it left out could change the verdict)", evidence)
    detail = f"{judged.detail}; {said}" if judged.detail else said
    return replace(judged, detail=detail, evidence=evidence)


def _judge(question: Question, key: Key, context: Mapping[str, float | None] | None) -> Judged:
    # The Evidence is built once, when every number is known: it is made for every check of every
    # target, and a frozen dataclass's replace() per number cost a third of judging a fleet.
    operator = question.operator
    seen: dict[str, Any] = {
        "check": question.id,
        "query": question.query,
        "operator": operator,
        "threshold": question.threshold,
        "baseline_at": question.baseline_at,
        "unit": question.unit,
        "assumed": question.assumed,
        "context": context or {},
    }
    value, problem = _value(question, question.now, key, current=True)
    if problem is not None:
        return Judged(Verdict.UNKNOWN, problem[0], problem[1], Evidence(**seen))
    assert value is not None
    seen["value"] = value
    if question.baseline is not None:
        baseline, problem = _value(question, question.baseline, key)
        if problem is not None:
            reason = Reason.NO_BASELINE if problem[0] in (Reason.NO_DATA, Reason.ZERO_OVER_ZERO) else problem[0]
            return Judged(Verdict.UNKNOWN, reason, f"baseline: {problem[1]}", Evidence(**seen))
        seen["baseline"] = baseline
    if question.sustained is not None:
        now, _ = _value(question, question.current, key, current=True) if question.current else (None, None)
        seen.update(current=now, sustained_for=question.sustained[0], share=question.sustained[1])
    evidence = Evidence(**seen)
    compared = evidence.compared
    assert compared is not None
    matched, excess = _compare(operator, compared, question.threshold)
    return Judged(Verdict.MATCHED if matched else Verdict.CLEAR, evidence=evidence, excess=excess)


@lru_cache(maxsize=1024)
def _quantile(query: str) -> bool:
    """Whether the query is a histogram_quantile (or an `or` of them): its +Inf is a real value.

    histogram_quantile answers +Inf when the quantile lies beyond the highest finite bucket: the
    observations are larger than the histogram can say, which is a very large value, not 0/0.
    """
    try:
        expr = promql.parse(query)
    except ValueError:
        return False

    def only(node: pp.Expr) -> bool:
        if isinstance(node, pp.ParenExpr):
            return only(node.expr)
        if isinstance(node, pp.BinaryExpr):
            return str(node.op) == "or" and only(node.lhs) and only(node.rhs)
        return isinstance(node, pp.Call) and node.func.name == "histogram_quantile"

    return only(expr)


def _value(
    question: Question, answer: Answer, key: Key, *, current: bool = False
) -> tuple[float | None, tuple[Reason, str] | None]:
    if answer.error is not None:
        reason = Reason.TIMEOUT if isinstance(answer.error, SourceTimeout) else Reason.QUERY_ERROR
        return None, (reason, answer.error.detail)
    if answer.short_history is not None:
        return None, (Reason.SHORT_HISTORY, answer.short_history)
    samples = answer.samples(key)
    if not samples:
        if answer.fleet_level:
            return None, (Reason.FLEET_LEVEL, "the answer has no target labels: see fleet-wide")
        if question.all_absent:
            return None, (Reason.METRIC_ABSENT, f"no series of {', '.join(question.absent)} on this Prometheus")
        if question.absent_as_zero and question.unsourced:
            # A count whose own series do not exist (its exporter is missing) counted nothing:
            # no sample is not "zero events" but "could not look".
            return None, (Reason.METRIC_ABSENT, f"no series of {', '.join(question.unsourced)}: no count to read as 0")
        if question.absent_as_zero:
            return 0.0, None
        detail = "no sample for this target"
        if question.absent:
            detail += f" (absent metrics: {', '.join(question.absent)})"
        return None, (Reason.NO_DATA, detail)
    values: list[float] = []
    for sample in samples:
        if question.value_label is None:
            values.append(sample.value)
            continue
        raw = sample.labels.get(question.value_label)
        try:
            values.append(float(raw) if raw is not None else math.nan)
        except ValueError:
            return None, (Reason.BAD_VALUE, f"label {question.value_label}={raw!r} is not a number")
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return None, (Reason.ZERO_OVER_ZERO, "the query gave NaN (0/0, or no observations in the window)")
    infinite = [v for v in finite if math.isinf(v)]
    if infinite:
        quantile = _quantile(question.query)
        if quantile and current and all(v > 0 for v in infinite):
            pass  # beyond the top bucket: a real, very large value (above: matched; below: clear)
        elif quantile and all(v > 0 for v in infinite):
            return None, (Reason.INFINITE, "the quantile lay beyond the histogram's top bucket (+Inf): no ratio to it")
        else:
            spelled = "+Inf" if infinite[0] > 0 else "-Inf"
            return None, (Reason.INFINITE, f"the query gave {spelled} (division by zero), not a measurement")
    # Several series for one target (a query not aggregated to the target): judge the worst one.
    return (min(finite) if question.operator.endswith("below") else max(finite)), None


def _compare(operator: str, compared: float, threshold: float) -> tuple[bool, float]:
    if operator.endswith("above"):
        return compared > threshold, _excess(compared, threshold)
    return compared < threshold, _excess(threshold, compared)


def _excess(big: float, small: float) -> float:
    """How many times `big` exceeds `small` (>1 when past the threshold); for ranking only."""
    if small > 0 and big >= 0:
        return big / small if math.isfinite(big) else math.inf
    return 1.0 + (big - small)


def result(question: Question, judged: Judged, depth: int, parent: str | None, cause: str | None) -> CheckResult:
    return CheckResult(
        id=question.id,
        kind=question.kind,
        title=question.title,
        depth=depth,
        verdict=judged.verdict,
        parent=parent,
        reason=judged.reason,
        detail=judged.detail,
        evidence=judged.evidence,
        cause=cause,
        warnings=judged.evidence.warnings if judged.evidence is not None else (),
    )


def context_values(answers: Sequence[tuple[str, Answer]], key: Key) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, answer in answers:
        samples = [] if answer.error else answer.samples(key)
        values = [s.value for s in samples if math.isfinite(s.value)]
        out[name] = max(values) if values else None
    return out
