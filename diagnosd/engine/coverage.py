"""Whether a tree's queries can run on a given Prometheus: which spellings exist, what is missing.

Pure: takes the set of metric names the Prometheus has. `a or b` can run when either side can;
`absent(x)` always can; every other operator needs all its operands.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

import promql_parser as pp

from diagnosd.engine import params as P
from diagnosd.trees import promql
from diagnosd.trees.aliases import Aliases
from diagnosd.trees.model import Tree, queries


@dataclass(frozen=True)
class QueryCoverage:
    tree: str
    check: str
    runnable: bool
    found: dict[str, list[str]]
    missing: list[str]


def tree_coverage(tree: Tree, aliases: Aliases, present: Set[str]) -> list[QueryCoverage]:
    values = P.effective(tree)
    out = []
    for check, text in queries(tree):
        expr = promql.parse(promql.substitute(text, values, tree.target))
        names = promql.selector_names(expr)
        spelled = {n: [v for v in aliases.variants(n) if v in present] for n in names}
        have = {n for n, found in spelled.items() if found}
        out.append(
            QueryCoverage(
                tree=tree.id,
                check=check,
                runnable=runnable(expr, have),
                found={n: f for n, f in spelled.items() if f},
                missing=[n for n in names if n not in have],
            )
        )
    return out


def candidates(tree: Tree, aliases: Aliases) -> set[str]:
    values = P.effective(tree)
    names = {
        n
        for _, text in queries(tree)
        for n in promql.selector_names(promql.parse(promql.substitute(text, values, tree.target)))
    }
    return {v for n in names for v in aliases.variants(n)}


def runnable(expr: pp.Expr, have: Set[str]) -> bool:
    if isinstance(expr, pp.VectorSelector):
        return expr.name in have if expr.name else True
    if isinstance(expr, pp.MatrixSelector):
        return runnable(expr.vector_selector, have)
    if isinstance(expr, pp.BinaryExpr):
        op = str(expr.op)
        if op == "or":
            return runnable(expr.lhs, have) or runnable(expr.rhs, have)
        if op == "unless":
            return runnable(expr.lhs, have)
        return runnable(expr.lhs, have) and runnable(expr.rhs, have)
    if isinstance(expr, pp.Call):
        if expr.func.name in ("absent", "absent_over_time"):
            return True
        return all(runnable(arg, have) for arg in expr.args if isinstance(arg, pp.Expr))
    inner = getattr(expr, "expr", None)
    return runnable(inner, have) if isinstance(inner, pp.Expr) else True
