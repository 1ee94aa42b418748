"""PromQL as the trees use it: `$param` substitution, parsing, and the metric names a query reads.

Queries are checked here at load time so that a tree that loads is a tree whose every query
Prometheus will parse.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta

import promql_parser as pp

from diagnosd.topology import JOIN_MARK, Topology, expand
from diagnosd.trees.model import DURATION

REF = re.compile(r"\$([a-z][a-z0-9_]*)")
TARGET_REF = "target"


def refs(text: str) -> set[str]:
    """The `$names` a query or value mentions (`$target` included)."""
    return set(REF.findall(text))


def render_value(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def substitute(
    text: str, params: Mapping[str, float | str], target: list[str], topology: Topology | None = None
) -> str:
    """Replace `$target` with the target labels, each `$param` with its value, then expand the
    topology recipes (`@pod_node`, `@node(...)`, `@unscoped(...)`, see diagnosd/topology).

    Raises KeyError naming the first unknown `$` reference, ValueError for a bad recipe reference.
    """

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == TARGET_REF:
            return ", ".join(target)
        return render_value(params[name])

    return expand(REF.sub(one, text), topology)


def parse(text: str) -> pp.Expr:
    """Parse PromQL; raises ValueError with the parser's message."""
    return pp.parse(text)


def selector_names(expr: pp.Expr) -> list[str]:
    """Metric names of every vector selector (inside ranges and subqueries too), in query order."""
    names: list[str] = []

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            if node.name:
                names.append(node.name)
            else:
                names.extend(_name_matcher_values(node))

    pp.walk(expr, pre_visit=visit)
    return list(dict.fromkeys(names))


def join_names(expr: pp.Expr) -> set[str]:
    """Names read only by the selectors a topology recipe brings in (alternative join sources)."""
    joined: set[str] = set()
    own: set[str] = set()

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector):
            names = [node.name] if node.name else _name_matcher_values(node)
            marked = any(m.name == JOIN_MARK for m in node.matchers.matchers)
            (joined if marked else own).update(names)

    pp.walk(expr, pre_visit=visit)
    return joined - own


def missing_source(expr: pp.Expr, present: Callable[[str], bool]) -> list[str]:
    """The names whose absence leaves the expression without its data: every name outside an
    `or`, and under an `or` only where both sides lack theirs (`a and (b or c)` needs a, and b or c).

    Empty when the expression can be answered from what exists; a count that then has no sample
    for a target truly counted nothing there.
    """
    if isinstance(expr, pp.VectorSelector):
        names = [expr.name] if expr.name else _name_matcher_values(expr)
        return [n for n in names if not present(n)]
    if isinstance(expr, pp.BinaryExpr):
        left, right = missing_source(expr.lhs, present), missing_source(expr.rhs, present)
        if str(expr.op) == "or":
            return left + right if left and right else []
        return left + right
    out: list[str] = []
    for child in _children(expr):
        out += missing_source(child, present)
    return out


def _children(expr: pp.Expr) -> list[pp.Expr]:
    if isinstance(expr, pp.MatrixSelector):
        return [expr.vector_selector]
    if isinstance(expr, pp.Call):
        return list(expr.args)
    if isinstance(expr, pp.AggregateExpr):
        return [expr.expr] + ([expr.param] if expr.param is not None else [])
    if isinstance(expr, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        return [expr.expr]
    return []  # literals


def _name_matcher_values(node: pp.VectorSelector) -> list[str]:
    for matcher in node.matchers.matchers:
        if matcher.name == "__name__" and str(matcher.op) == "MatchOp.Equal":
            return [matcher.value]
    return []


def parse_duration(text: str) -> timedelta:
    """A Prometheus duration (`30s`, `1h30m`, `0s`) as a timedelta; ValueError naming the text otherwise.
    The one parse: settings, params, series tests and alert rules all read durations here."""
    if not DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration such as 30s, 5m or 1h")
    if not any(ch in "123456789" for ch in text):
        return timedelta(0)  # promql-parser refuses 0s, a fine `for`
    parsed: timedelta = pp.parse_duration(text)
    return parsed


def format_duration(value: timedelta) -> str:
    """A timedelta the way Prometheus writes durations: 1d2h, 30s, 250ms."""
    millis = round(value.total_seconds() * 1000)
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def reach(expr: pp.Expr) -> timedelta:
    """How far before its evaluation time a query reads, at most: its longest range or offset, plus
    every subquery's window (nested subqueries add up). A bound, for telling a TSDB too young."""
    longest = timedelta(0)
    subqueries = timedelta(0)

    def visit(node: pp.Expr) -> None:
        nonlocal longest, subqueries
        if isinstance(node, pp.MatrixSelector):
            longest = max(longest, (node.range or timedelta(0)) + (node.vector_selector.offset or timedelta(0)))
        elif isinstance(node, pp.VectorSelector):
            longest = max(longest, node.offset or timedelta(0))
        elif isinstance(node, pp.SubqueryExpr):
            subqueries += (node.range or timedelta(0)) + (node.offset or timedelta(0))

    pp.walk(expr, pre_visit=visit)
    return longest + subqueries


def stepless_subqueries(expr: pp.Expr) -> int:
    """Subqueries written `[1h:]`: the parser's printer drops the colon, so they need a step."""
    count = 0

    def visit(node: pp.Expr) -> None:
        nonlocal count
        if isinstance(node, pp.SubqueryExpr) and node.step is None:
            count += 1

    pp.walk(expr, pre_visit=visit)
    return count


def unsafe_literals(expr: pp.Expr) -> list[str]:
    """String literals the parser's printer cannot round-trip (it does not escape them).

    Rewritten queries are printed from the AST, so a literal holding a backslash or a double
    quote would reach Prometheus changed; trees must spell `\\.` as `[.]` instead.
    """
    bad: list[str] = []

    def visit(node: pp.Expr) -> None:
        values: list[str] = []
        if isinstance(node, pp.VectorSelector):
            values = [m.value for m in node.matchers.matchers]
        elif isinstance(node, pp.StringLiteral):
            values = [node.val]
        bad.extend(v for v in values if "\\" in v or '"' in v or "\n" in v)

    pp.walk(expr, pre_visit=visit)
    return bad


# Functions whose answer has no labels at all (or only those of equality matchers: absent).
_LABELLESS = frozenset({"scalar", "vector", "time", "pi", "absent", "absent_over_time"})
# Aggregations that keep each sample's own labels.
_SELECTING = frozenset({"topk", "bottomk", "limitk", "limit_ratio"})
# Functions that set the label named by their second argument.
_LABEL_SETTING = frozenset({"label_replace", "label_join"})


def answers_per_target(expr: pp.Expr, target: Collection[str]) -> bool:
    """Whether every sample of the answer carries the `target` labels, given series that carry
    them: False for an expression that may answer for no target at all (a `sum` without them, a
    `count`, `scalar()`, a one-to-one match `on` other labels), whose value then depends on
    every series in scope. Prometheus' label rules (promql/engine.go resultMetric): a one-to-one
    match keeps the `on` labels alone, or drops the `ignoring` ones; group_left keeps the left
    side's and the included ones of the right, group_right the reverse; `and` / `unless` the
    left side's; `or` either side's."""
    wanted = frozenset(target)
    return _present(expr, wanted) == wanted


def _present(node: pp.Expr, wanted: frozenset[str]) -> frozenset[str]:
    """The `wanted` labels every sample of `node`'s answer certainly carries."""
    none: frozenset[str] = frozenset()
    if isinstance(node, (pp.VectorSelector, pp.MatrixSelector)):
        return wanted
    if isinstance(node, (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr)):
        return _present(node.expr, wanted)
    if isinstance(node, pp.Call):
        if node.func.name in _LABELLESS:
            return none
        vectors = [a for a in node.args if not _is_scalar(a)]
        if not vectors:
            return none
        found = _present(vectors[0], wanted)
        if node.func.name in _LABEL_SETTING and isinstance(node.args[1], pp.StringLiteral):
            found |= wanted & {node.args[1].val}
        return found
    if isinstance(node, pp.AggregateExpr):
        inner = _present(node.expr, wanted)
        if str(node.op) in _SELECTING:
            return inner
        modifier = node.modifier
        if modifier is None:
            return none
        if modifier.type == pp.AggModifierType.By:
            return inner & set(modifier.labels)
        return inner - set(modifier.labels)
    if isinstance(node, pp.BinaryExpr):
        return _binary_present(node, wanted)
    return none


def _binary_present(node: pp.BinaryExpr, wanted: frozenset[str]) -> frozenset[str]:
    if _is_scalar(node.lhs) and _is_scalar(node.rhs):
        return frozenset()
    if _is_scalar(node.lhs):
        return _present(node.rhs, wanted)
    if _is_scalar(node.rhs):
        return _present(node.lhs, wanted)
    lhs, rhs = _present(node.lhs, wanted), _present(node.rhs, wanted)
    op = str(node.op)
    if op == "or":
        return lhs & rhs
    modifier = node.modifier
    if op in ("and", "unless") or modifier is None:
        return lhs
    included = set(modifier.group_labels or ())
    if modifier.card == pp.VectorMatchCardinality.ManyToOne:
        return lhs | (rhs & included)
    if modifier.card == pp.VectorMatchCardinality.OneToMany:
        return rhs | (lhs & included)
    matching = modifier.matching
    if matching is None:
        return lhs
    if matching.type == pp.LabelModifierType.Include:  # on (...)
        return lhs & set(matching.labels)
    return lhs - set(matching.labels)


def _is_scalar(node: pp.Expr) -> bool:
    """A number or string, or an expression of numbers and scalar() / time() calls alone."""
    if isinstance(node, (pp.NumberLiteral, pp.StringLiteral)):
        return True
    if isinstance(node, (pp.ParenExpr, pp.UnaryExpr)):
        return _is_scalar(node.expr)
    if isinstance(node, pp.Call):
        return node.func.name in ("scalar", "time", "pi")
    if isinstance(node, pp.BinaryExpr):
        return _is_scalar(node.lhs) and _is_scalar(node.rhs)
    return False
