"""Where in time the trees read, as the plain numbers the simulator ticks by.

A diagnosis evaluates every query at its time and each comparison's query again a baseline
earlier; inside a query each selector reads a range (an instant selector Prometheus' lookback)
ending at its own offset, and a subquery widens what its selectors read by its own range. Each
such read is a `Look`: `window` seconds ending `offset` seconds before the anchor. Short looks
(minutes to an hour or two) get the simulator's dense ticks; long ones (a GPU's peak clock over
7 days) only need the history to reach back that far, where hourly samples of the few metrics
they read are enough for a max or a mean of a slowly moving value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta

import promql_parser as pp

from diagnosd.engine.evaluator import sustained_query
from diagnosd.engine.params import duration, effective
from diagnosd.trees import promql
from diagnosd.trees.model import Tree, comparisons, queries

LOOKBACK = 300.0  # Prometheus' default: how far back an instant selector finds its last sample
SHORT = 2 * 3600.0  # the longest window that is ticked densely
MARGIN = 3600.0  # history before the earliest read: pods started, counters running
COARSE = 900.0

Overrides = Mapping[str, Mapping[str, float | str]]  # tree id -> param -> value, as the Diagnoser takes them


@dataclass(frozen=True, order=True)
class Look:
    """A read of `window` seconds ending `offset` seconds before the evaluation time."""

    offset: float
    window: float

    @property
    def reach(self) -> float:
        return self.offset + self.window


@dataclass(frozen=True)
class Plan:
    """What the simulator needs to serve these looks: dense (offset, window) pairs, a history, and
    where the short looks end (`far` before the anchor; infinite: nowhere before the history's
    start): before it only the long looks read, and only the names they read (`far_names`)."""

    dense: tuple[tuple[float, float], ...]
    history: float
    far: float = math.inf
    far_names: frozenset[str] = frozenset()


Reads = dict[Look, frozenset[str]]  # each look, and the metric names read so


def reads(expr: pp.Expr, at: float = 0.0) -> Reads:
    """Every selector's read of a query evaluated `at` seconds before the anchor."""
    out: dict[Look, set[str]] = {}

    def visit(node: pp.Expr, offset: float, widened: float) -> None:
        if isinstance(node, pp.MatrixSelector):
            own = _seconds(node.vector_selector.offset)
            out.setdefault(Look(offset + own, widened + _seconds(node.range)), set()).update(_names(node))
        elif isinstance(node, pp.VectorSelector):
            out.setdefault(Look(offset + _seconds(node.offset), widened + LOOKBACK), set()).update(_names(node))
        elif isinstance(node, pp.SubqueryExpr):
            visit(node.expr, offset + _seconds(node.offset), widened + _seconds(node.range))
        elif isinstance(node, pp.Call):
            for arg in node.args:
                visit(arg, offset, widened)
        elif isinstance(node, pp.AggregateExpr):
            visit(node.expr, offset, widened)
            if node.param is not None:
                visit(node.param, offset, widened)
        elif isinstance(node, pp.BinaryExpr):
            visit(node.lhs, offset, widened)
            visit(node.rhs, offset, widened)
        elif isinstance(node, pp.ParenExpr | pp.UnaryExpr):
            visit(node.expr, offset, widened)
        # literals read nothing

    visit(expr, at, 0.0)
    return {look: frozenset(names) for look, names in out.items()}


def looks(trees: Iterable[Tree], params: Overrides | None = None, *, at: float = 0.0) -> Reads:
    """Every read a diagnosis of these trees `at` seconds before the anchor makes: each query then
    and, where it compares with a baseline, that much earlier again."""
    out: list[Reads] = []
    for tree in trees:
        values = effective(tree, (params or {}).get(tree.id))
        compared = dict(comparisons(tree))
        for key, text in queries(tree):
            leaf = compared.get(key)
            offsets = {at}
            texts = [text]
            if leaf is not None:
                baseline = leaf.comparison()[1].baseline
                if baseline is not None:
                    offsets.add(at + duration(baseline, values).total_seconds())
                if leaf.sustained is not None:
                    texts.append(sustained_query(leaf, values))
            for one in texts:
                expr = promql.parse(promql.substitute(one, values, tree.target))
                out += [reads(expr, offset) for offset in offsets]
    return joined(*out)


def joined(*found: Reads) -> Reads:
    out: dict[Look, frozenset[str]] = {}
    for one in found:
        for look, names in one.items():
            out[look] = out.get(look, frozenset()) | names
    return out


def plan(found: Reads, *, short: float = SHORT, coarse: float = COARSE, margin: float = MARGIN) -> Plan:
    """What serves these reads: the short ones ticked densely (those at most a coarse step apart
    joined), a history reaching `margin` before the farthest read, and before `margin` beyond the
    short ones only the names the long ones read (all in whole coarse steps)."""
    dense = merged((look for look in found if look.window <= short), gap=coarse)
    history = _steps(max((look.reach for look in found), default=0.0) + margin, coarse)
    far = _steps(max((offset + window for offset, window in dense), default=0.0) + margin, coarse)
    if far >= history:
        return Plan(dense, history)
    names = frozenset().union(*(names for look, names in found.items() if look.reach > far))
    return Plan(dense, history, far, names)


def _steps(seconds: float, step: float) -> float:
    return math.ceil(seconds / step) * step


def merged(found: Iterable[Look], gap: float = 0.0) -> tuple[tuple[float, float], ...]:
    """Looks as (offset, window) pairs, nearest first; those that overlap, touch or lie at most
    `gap` apart are joined (the coarse ticks between them would be only a few)."""
    spans: list[list[float]] = []
    for look in sorted(found):
        if spans and look.offset <= spans[-1][1] + gap:
            spans[-1][1] = max(spans[-1][1], look.reach)
        else:
            spans.append([look.offset, look.reach])
    return tuple((start, end - start) for start, end in spans)


def _names(node: pp.MatrixSelector | pp.VectorSelector) -> list[str]:
    return promql.selector_names(node.vector_selector if isinstance(node, pp.MatrixSelector) else node)


def _seconds(value: timedelta | None) -> float:
    return value.total_seconds() if value is not None else 0.0
