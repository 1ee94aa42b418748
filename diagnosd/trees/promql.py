"""PromQL as the trees use it: `$param` substitution, parsing, and the metric names a query reads.

Queries are checked here at load time so that a tree that loads is a tree whose every query
Prometheus will parse.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import promql_parser as pp

REF = re.compile(r"\$([a-z][a-z0-9_]*)")
TARGET_REF = "target"


def refs(text: str) -> set[str]:
    """The `$names` a query or value mentions (`$target` included)."""
    return set(REF.findall(text))


def render_value(value: float | str) -> str:
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def substitute(text: str, params: Mapping[str, float | str], target: list[str]) -> str:
    """Replace `$target` with the target labels and each `$param` with its value.

    Raises KeyError naming the first unknown reference.
    """

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == TARGET_REF:
            return ", ".join(target)
        return render_value(params[name])

    return REF.sub(one, text)


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


def _name_matcher_values(node: pp.VectorSelector) -> list[str]:
    for matcher in node.matchers.matchers:
        if matcher.name == "__name__" and str(matcher.op) == "MatchOp.Equal":
            return [matcher.value]
    return []


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
