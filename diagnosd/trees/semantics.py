"""Checks a tree beyond its shape: ids, params, durations, PromQL, and agreement with the catalog.

Each check yields (data path, message) so the loader can point at the line.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path

import promql_parser as pp

from diagnosd.errors import Problem
from diagnosd.trees import promql
from diagnosd.trees.catalog import Catalog
from diagnosd.trees.model import (
    DURATION,
    LABEL_NAME,
    AnyNode,
    Basis,
    CheckNode,
    Compare,
    Conditional,
    Severity,
    Tree,
    leaves,
    walk,
)

Loc = tuple[str | int, ...]
Found = Iterator[tuple[Loc, str]]
_SEVERITY = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


def check_tree(tree: Tree, stem: str, catalog: Catalog | None) -> Found:
    if tree.id != stem:
        yield ("id",), f"tree id {tree.id!r} must match its file name {stem!r}"
    yield from _check_target(tree)
    yield from _check_params(tree)
    yield from _check_ids(tree)
    params = {name: p.default for name, p in tree.params.items()}
    yield from _check_conditional(tree, ("detect",), tree.detect, params)
    for index, context in enumerate(tree.detect.context):
        yield from _check_query(tree, ("detect", "context", index, "query"), context.query, params)
    if tree.traffic is not None:
        yield from _check_query(tree, ("traffic", "query"), tree.traffic.query, params)
        yield from _check_number(tree, ("traffic", "min"), tree.traffic.min)
    for loc, node in node_locations(tree):
        if isinstance(node, CheckNode):
            yield from _check_check(tree, loc, node, params)
    yield from _check_explains(tree)
    yield from check_cannot_fail(tree, params)
    if catalog is not None:
        yield from _check_against_catalog(tree, catalog)


def node_locations(tree: Tree) -> Iterator[tuple[Loc, AnyNode]]:
    """Every node with its data path (`nodes`, 1, `children`, 0 ...), in seed order."""

    def visit(nodes: list[AnyNode], base: Loc) -> Iterator[tuple[Loc, AnyNode]]:
        for index, node in enumerate(nodes):
            loc = (*base, index)
            yield loc, node
            yield from visit(list(node.children), (*loc, "children"))

    yield from visit(list(tree.nodes), ("nodes",))


def _check_target(tree: Tree) -> Found:
    for index, label in enumerate(tree.target):
        if not LABEL_NAME.match(label) or label.startswith("__"):
            yield ("target", index), f"{label!r} is not a usable label name"


def _check_params(tree: Tree) -> Found:
    for name, param in tree.params.items():
        if not promql.REF.fullmatch(f"${name}") or name == promql.TARGET_REF:
            yield ("params", name), f"param name {name!r} must be lowercase snake case and not 'target'"
        if isinstance(param.default, str) and not DURATION.match(param.default):
            yield ("params", name, "default"), f"{param.default!r} is neither a number nor a duration (10m, 1d)"


# The keys the engine gives the tree's own queries, beside its nodes' ids.
RESERVED_IDS = frozenset({"detect", "traffic"})


def _check_ids(tree: Tree) -> Found:
    seen: dict[str, Loc] = {}
    causes: dict[str, Loc] = {}
    for loc, node in node_locations(tree):
        if node.id in RESERVED_IDS:
            yield (*loc, "id"), f"node id {node.id!r} is reserved: it names the tree's own {node.id} query"
        if node.id in seen:
            yield (*loc, "id"), f"node id {node.id!r} is used twice in this tree"
        seen[node.id] = loc
        conclusion = getattr(node, "conclusion", None)
        if conclusion is not None:
            if conclusion.cause in causes:
                yield (*loc, "conclusion", "cause"), f"cause {conclusion.cause!r} is concluded twice in this tree"
            causes[conclusion.cause] = loc


def _check_explains(tree: Tree) -> Found:
    """`explains` names other causes of this tree, only from checks, with ratio checks under `slack`,
    and never in a circle (a cause that explains itself, however indirectly, explains nothing).
    An explaining cause is at least as severe as what it explains; a derived check, or one whose
    branch never compares with a baseline (a standing state), explains only with `slack`."""
    concluding: dict[str, AnyNode] = {}
    # Whether a node's branch (the node or a check above it) compares a ratio: what `slack` sizes.
    ratio_branch: dict[str, bool] = {}
    # Whether it compares anything with a baseline (ratio or delta): a change, not a standing state.
    change_branch: dict[str, bool] = {}
    for loc, node in node_locations(tree):
        conclusion = getattr(node, "conclusion", None)
        if conclusion is not None:
            concluding.setdefault(conclusion.cause, node)
        parent_id = _parent_id(tree, loc) or ""
        operators = (
            [leaf.comparison()[1].operator for _, leaf in leaves(node.id, node)] if isinstance(node, CheckNode) else []
        )
        ratio_branch[node.id] = ratio_branch.get(parent_id, False) or any(o.startswith("ratio_") for o in operators)
        change_branch[node.id] = change_branch.get(parent_id, False) or any(
            o.startswith(("ratio_", "delta_")) for o in operators
        )
    edges: dict[str, list[str]] = {}
    for loc, node in node_locations(tree):
        conclusion = getattr(node, "conclusion", None)
        if conclusion is None or not conclusion.explains:
            continue
        at = (*loc, "conclusion", "explains")
        if not isinstance(node, CheckNode):
            yield at, "only a check's conclusion can explain other causes: a manual node never matches"
            continue
        seen: set[str] = set()
        for index, item in enumerate(conclusion.explains):
            if item.cause == conclusion.cause:
                yield (*at, index, "cause"), f"cause {item.cause!r} cannot explain itself"
                continue
            if item.cause in seen:
                yield (*at, index, "cause"), f"cause {item.cause!r} is listed twice"
                continue
            seen.add(item.cause)
            other = concluding.get(item.cause)
            if other is None:
                known = ", ".join(sorted(concluding))
                yield (*at, index, "cause"), f"no node of this tree concludes {item.cause!r} (causes: {known})"
                continue
            edges.setdefault(conclusion.cause, []).append(item.cause)
            explained = getattr(other, "conclusion", None)
            if explained is not None and _SEVERITY[conclusion.severity] > _SEVERITY[explained.severity]:
                yield (
                    (*at, index, "cause"),
                    f"{conclusion.cause!r} ({conclusion.severity}) cannot explain the more severe "
                    f"{item.cause!r} ({explained.severity}): an explanation never demotes a more severe cause",
                )
            if item.slack is None:
                unsized = "a derived check" if node.basis is Basis.DERIVED else None
                if unsized is None and not change_branch.get(node.id):
                    unsized = "a check that compares no value with a baseline on its branch (a standing state)"
                if unsized is not None:
                    yield (
                        (*at, index, "cause"),
                        f"{conclusion.cause!r} is {unsized}: it matches alongside {item.cause!r} without having "
                        "produced it, so it explains only with a size check (slack) or not at all",
                    )
                continue
            yield from _check_number(tree, (*at, index, "slack"), item.slack)
            if not isinstance(item.slack, str) and item.slack < 1:
                yield (*at, index, "slack"), f"slack {item.slack:g} must be at least 1"
            lacking = [c for c, n in ((conclusion.cause, node), (item.cause, other)) if not ratio_branch.get(n.id)]
            if lacking:
                yield (
                    (*at, index, "slack"),
                    "slack compares two changes against their baselines: "
                    f"{' and '.join(repr(c) for c in lacking)} has no ratio_above / ratio_below check on its branch",
                )
    yield from _check_cycles(edges)


def _parent_id(tree: Tree, loc: Loc) -> str | None:
    if len(loc) < 4:
        return None
    node: AnyNode = tree.nodes[int(loc[1])]
    for index in loc[3:-2:2]:
        node = node.children[int(index)]
    return node.id


def _check_cycles(edges: Mapping[str, list[str]]) -> Found:
    done: set[str] = set()

    def visit(cause: str, path: list[str]) -> Iterator[str]:
        if cause in path:
            yield " → ".join([*path[path.index(cause) :], cause])
            return
        if cause in done:
            return
        for nxt in edges.get(cause, []):
            yield from visit(nxt, [*path, cause])
        done.add(cause)

    reported: set[frozenset[str]] = set()
    for start in edges:
        for cycle in visit(start, []):
            key = frozenset(cycle.split(" → "))
            if key not in reported:
                reported.add(key)
                yield ("nodes",), f"explanations go in a circle: {cycle}"


def _check_check(tree: Tree, loc: Loc, node: CheckNode, params: Mapping[str, float | str]) -> Found:
    yield from _check_conditional(tree, loc, node, params)
    for index, context in enumerate(node.context):
        yield from _check_query(tree, (*loc, "context", index, "query"), context.query, params)


def _located_leaves(loc: Loc, item: Conditional) -> Iterator[tuple[Loc, Conditional]]:
    """Each simple comparison of an item with where it is written (`all` / `any` and an index)."""
    if item.combine is None:
        yield loc, item
        return
    for index, condition in enumerate(item.conditions):
        yield from _located_leaves((*loc, item.combine, index), condition)


def _check_conditional(tree: Tree, loc: Loc, item: Conditional, params: Mapping[str, float | str]) -> Found:
    """Each comparison's query, compare and `sustained` (every condition of all / any)."""
    for where, leaf in _located_leaves(loc, item):
        yield from _check_leaf(tree, where, leaf, params)


def _check_leaf(tree: Tree, loc: Loc, item: Conditional, params: Mapping[str, float | str]) -> Found:
    query, compare = item.comparison()
    yield from _check_query(tree, (*loc, "query"), query, params)
    yield from _check_compare(tree, (*loc, "compare"), compare)
    if item.value_label is not None and not LABEL_NAME.match(item.value_label):
        yield (*loc, "value_label"), f"{item.value_label!r} is not a label name"
    if item.sustained is not None:
        yield from _check_number(tree, (*loc, "sustained", "share"), item.sustained.share)
        for name, raw in (("for", item.sustained.for_), ("step", item.sustained.step)):
            value = _resolve(tree, raw)
            if not isinstance(value, str) or not DURATION.match(value):
                yield (*loc, "sustained", name), f"{name} {raw!r} must be a duration or a duration param"


def _check_query(tree: Tree, loc: Loc, text: str, params: Mapping[str, float | str]) -> Found:
    unknown = sorted(promql.refs(text) - set(params) - {promql.TARGET_REF})
    if unknown:
        yield loc, f"unknown param{'s' if len(unknown) > 1 else ''}: {', '.join('$' + u for u in unknown)}"
        return
    try:
        rendered = promql.substitute(text, params, tree.target)
    except ValueError as error:  # a topology recipe reference (diagnosd/topology)
        yield loc, str(error)
        return
    try:
        expr = promql.parse(rendered)
    except ValueError as error:
        yield loc, f"PromQL does not parse: {error} (query: {rendered})"
        return
    for literal in promql.unsafe_literals(expr):
        yield loc, f"string {literal!r} holds a backslash, quote or newline; write regex escapes as classes ([.])"
    if promql.stepless_subqueries(expr):
        yield (
            loc,
            "a subquery needs an explicit step ([1h:1m], not [1h:]): queries are reprinted from their parsed form",
        )
    if not promql.selector_names(expr):
        yield loc, "the query reads no metric by name"
    for folded in bool_arithmetic(expr):
        yield (
            loc,
            f"a `bool` comparison is folded into arithmetic ({folded}): write the conditions as all: / any:",
        )


ARITHMETIC = {"+", "-", "*", "/", "%", "^", "atan2"}
# Aggregations that turn 0/1 into a count or share (idle GPUs, ports down): a number, not a gate.
COUNTING = {"sum", "count", "avg"}


def bool_arithmetic(expr: pp.Expr) -> list[str]:
    """Every `x > bool T` (or ==, <...) that is an operand of + - * /: a boolean gating a value.

    A comparison under sum / count / avg is a count or a share and stays allowed; so does a join
    written `0 * x + on (...) y`, which only carries y's value over.
    """
    found: list[str] = []

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.BinaryExpr) and str(node.op) in ARITHMETIC:
            sides = [node.lhs, node.rhs]
            if not any(_zero_join(side) for side in sides):
                found.extend(str(b) for side in sides if (b := _gating_bool(side)) is not None)
        for child in _children(node):
            visit(child)

    visit(expr)
    return found


def _gating_bool(node: pp.Expr) -> pp.Expr | None:
    if isinstance(node, pp.ParenExpr | pp.SubqueryExpr):
        return _gating_bool(node.expr)
    if isinstance(node, pp.AggregateExpr):
        return None if str(node.op) in COUNTING else _gating_bool(node.expr)
    if isinstance(node, pp.Call):
        return next((b for arg in node.args if (b := _gating_bool(arg)) is not None), None)
    if isinstance(node, pp.BinaryExpr):
        if node.modifier is not None and node.modifier.return_bool:
            return node
        if str(node.op) in ("or", "and", "unless"):
            return _gating_bool(node.lhs) or (_gating_bool(node.rhs) if str(node.op) == "or" else None)
    return None


def _zero_join(node: pp.Expr) -> bool:
    if isinstance(node, pp.ParenExpr):
        return _zero_join(node.expr)
    if not isinstance(node, pp.BinaryExpr) or str(node.op) != "*":
        return False
    return any(isinstance(side, pp.NumberLiteral) and side.val == 0 for side in (node.lhs, node.rhs))


def _children(node: pp.Expr) -> list[pp.Expr]:
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.ParenExpr | pp.SubqueryExpr | pp.AggregateExpr | pp.UnaryExpr):
        return [node.expr]
    if isinstance(node, pp.Call):
        return list(node.args)
    return []


def _check_compare(tree: Tree, loc: Loc, compare: Compare) -> Found:
    yield from _check_number(tree, (*loc, compare.operator), compare.threshold)
    if compare.baseline is not None:
        value = _resolve(tree, compare.baseline)
        if not isinstance(value, str) or not DURATION.match(value):
            yield (*loc, "baseline"), f"baseline {compare.baseline!r} must be a duration or a duration param"


def _check_number(tree: Tree, loc: Loc, value: float | str) -> Found:
    if isinstance(value, str):
        if value[1:] not in tree.params:
            yield loc, f"unknown param {value}"
        elif isinstance(tree.params[value[1:]].default, str):
            yield loc, f"param {value} is a duration where a number is needed"


def _resolve(tree: Tree, value: str) -> float | str | None:
    if value.startswith("$"):
        param = tree.params.get(value[1:])
        return None if param is None else param.default
    return value


def _check_against_catalog(tree: Tree, catalog: Catalog) -> Found:
    entry = catalog.symptom(tree.id)
    if entry is None:
        yield ("id",), f"{tree.id!r} is not a symptom of the catalog"
        return
    concluded = {c.cause for node, _ in walk(list(tree.nodes)) if (c := getattr(node, "conclusion", None))}
    missing = [c.id for c in entry.causes if c.id not in concluded]
    if missing:
        yield ("nodes",), f"catalog causes missing from the tree: {', '.join(missing)}"


def check_catalog_coverage(catalog: Catalog, trees: Mapping[str, Tree], files: Mapping[str, Path]) -> list[Problem]:
    """Cross-file checks: duplicate symptom ids in the catalog."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for symptom in catalog.symptoms:
        if symptom.id in seen:
            problems.append(Problem("catalog.yaml", None, f"symptoms.{symptom.id}", "symptom id listed twice"))
        seen.add(symptom.id)
    return problems


# --- Checks that cannot fail -------------------------------------------------------------------
# A check whose verdict is settled before any data arrives is no evidence: the detect's own
# comparison asked again (matched wherever the symptom is, so always a "root cause"), a query
# compared with itself, or a 0/1 value compared with a threshold outside [0, 1].

COMPARISONS = {">", "<", ">=", "<=", "==", "!="}
Range = tuple[float, float]
# (normalised query, operator kind "above" / "below" / "ratio_above"..., threshold, baseline)
Comparison = tuple[str, str, float | None, str | None]


def check_cannot_fail(tree: Tree, params: Mapping[str, float | str]) -> Found:
    """Every check whose verdict cannot depend on the data (load errors: such a check proves nothing)."""
    implied = _implied(tree, tree.detect, params)
    yield from _constant_queries(tree, ("detect",), tree.detect, params)
    found: list[tuple[Loc, str]] = []

    def visit(nodes: list[AnyNode], base: Loc, above: list[Comparison], names: list[str]) -> None:
        for index, node in enumerate(nodes):
            loc = (*base, index)
            if isinstance(node, CheckNode):
                found.extend(_constant_queries(tree, loc, node, params))
                same = _always_where_asked(tree, node, params, above)
                if same is not None:
                    found.append(
                        (
                            loc,
                            f"the check repeats {names[same]}'s own comparison (same query, a threshold it "
                            "already passes): it matches wherever it is asked and cannot fail; test something "
                            f"{names[same]} does not",
                        )
                    )
                mine = _implied(tree, node, params)
                visit(list(node.children), (*loc, "children"), [*above, *mine], [*names, *([node.id] * len(mine))])
            else:
                visit(list(node.children), (*loc, "children"), above, names)

    visit(list(tree.nodes), ("nodes",), implied, ["the detect"] * len(implied))
    yield from found


def _comparison(tree: Tree, item: Conditional, params: Mapping[str, float | str]) -> Comparison | None:
    query, compare = item.comparison()
    try:
        text = str(promql.parse(promql.substitute(query, params, tree.target)))
    except (ValueError, KeyError):
        return None
    threshold = _number(tree, compare.threshold)
    baseline = _resolve(tree, compare.baseline) if compare.baseline is not None else None
    label = f"{item.value_label or ''}|{item.sustained!r}"
    return f"{text}#{label}", compare.operator, threshold, str(baseline) if baseline is not None else None


def _implied(tree: Tree, item: Conditional, params: Mapping[str, float | str]) -> list[Comparison]:
    """The comparisons that hold wherever `item` matched: itself, or every condition of an all:."""
    if item.combine == "any":
        return []
    if item.combine == "all":
        return [c for part in item.conditions for c in _implied(tree, part, params)]
    found = _comparison(tree, item, params)
    return [found] if found is not None else []


def _always_where_asked(
    tree: Tree, item: Conditional, params: Mapping[str, float | str], above: list[Comparison]
) -> int | None:
    """The index in `above` of a comparison that settles `item` as matched, if any."""
    if item.combine == "any":
        hits = [_always_where_asked(tree, c, params, above) for c in item.conditions]
        return next((h for h in hits if h is not None), None)
    if item.combine == "all":
        hits = [_always_where_asked(tree, c, params, above) for c in item.conditions]
        return hits[0] if hits and all(h is not None for h in hits) else None
    mine = _comparison(tree, item, params)
    if mine is None:
        return None
    return next((i for i, given in enumerate(above) if _settles(given, mine)), None)


def _settles(given: Comparison, asked: Comparison) -> bool:
    """`given` matched implies `asked` matches: same query, kind and baseline, a threshold no stricter."""
    query, operator, threshold, baseline = asked
    if (given[0], given[1], given[3]) != (query, operator, baseline) or threshold is None or given[2] is None:
        return False
    return threshold <= given[2] if operator.endswith("above") else threshold >= given[2]


def _number(tree: Tree, value: float | str) -> float | None:
    if isinstance(value, str):
        param = tree.params.get(value[1:])
        default = param.default if param is not None else None
        return float(default) if isinstance(default, int | float) else None
    return float(value)


def _constant_queries(tree: Tree, loc: Loc, item: Conditional, params: Mapping[str, float | str]) -> Found:
    """Self-comparisons anywhere in a query, and a 0/1 (or clamped) value its threshold cannot cut."""
    for where, leaf in _located_leaves(loc, item):
        yield from _constant_leaf(tree, where, leaf, params)


def _constant_leaf(tree: Tree, loc: Loc, item: Conditional, params: Mapping[str, float | str]) -> Found:
    query, compare = item.comparison()
    try:
        expr = promql.parse(promql.substitute(query, params, tree.target))
    except (ValueError, KeyError):
        return
    for text in _self_comparisons(expr):
        yield (*loc, "query"), f"{text} compares a value with itself: its answer is fixed before any data is read"
    for text, verdict in _settled_filters(expr):
        yield (*loc, "query"), f"the filter {text} {verdict}: its operand's value range settles it"
    threshold = _number(tree, compare.threshold)
    if item.value_label is not None or threshold is None or compare.operator not in ("above", "below"):
        return
    bounds = value_range(expr)
    if bounds is None:
        return
    low, high = bounds
    if compare.operator == "above":
        always, never = low > threshold, high <= threshold
    else:
        always, never = high < threshold, low >= threshold
    if always or never:
        said = "always matches" if always else "can never match"
        yield (
            (*loc, "compare"),
            f"the query's value lies in [{low:g}, {high:g}], so `{compare.operator}: {threshold:g}` {said}: "
            "the check cannot tell one case from another",
        )


def value_range(expr: pp.Expr) -> Range | None:
    """The values a query can take where that is fixed by its shape (0/1 of `bool`, clamp), else None."""
    if isinstance(expr, pp.ParenExpr):
        return value_range(expr.expr)
    if isinstance(expr, pp.NumberLiteral):
        return (expr.val, expr.val)
    if isinstance(expr, pp.BinaryExpr) and str(expr.op) in COMPARISONS:
        if expr.modifier is not None and expr.modifier.return_bool:
            return (0.0, 1.0)
        # A filter keeps its left side's values (those that pass).
        return value_range(expr.lhs)
    if isinstance(expr, pp.BinaryExpr) and str(expr.op) == "*":
        sides = [value_range(expr.lhs), value_range(expr.rhs)]
        if any(r == (0.0, 0.0) for r in sides):
            return (0.0, 0.0)
    if isinstance(expr, pp.AggregateExpr) and str(expr.op) in ("max", "min", "avg"):
        return value_range(expr.expr)
    if isinstance(expr, pp.Call):
        name = expr.func.name
        limits = [a.val if isinstance(a, pp.NumberLiteral) else None for a in expr.args[1:]]
        inner = value_range(expr.args[0]) if expr.args else None
        low, high = inner if inner is not None else (-math.inf, math.inf)
        if name == "clamp" and len(limits) == 2 and limits[0] is not None and limits[1] is not None:
            return (max(low, limits[0]), min(high, limits[1]))
        if name == "clamp_min" and limits and limits[0] is not None:
            return (max(low, limits[0]), high)
        if name == "clamp_max" and limits and limits[0] is not None:
            return (low, min(high, limits[0]))
        if name in ("max_over_time", "min_over_time", "avg_over_time", "last_over_time") and expr.args:
            return _range_of_matrix(expr.args[0])
    return None


def _range_of_matrix(node: pp.Expr) -> Range | None:
    if isinstance(node, pp.SubqueryExpr):
        return value_range(node.expr)
    return None


def _self_comparisons(expr: pp.Expr) -> list[str]:
    found: list[str] = []

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.BinaryExpr) and str(node.op) in COMPARISONS and str(node.lhs) == str(node.rhs):
            found.append(str(node))
        for child in _children(node):
            visit(child)

    visit(expr)
    return found


def _settled_filters(expr: pp.Expr) -> list[tuple[str, str]]:
    """Comparisons with a number (`(x > bool 0) >= 0`) whose operand's range decides them."""
    found: list[tuple[str, str]] = []

    def visit(node: pp.Expr) -> None:
        if (
            isinstance(node, pp.BinaryExpr)
            and str(node.op) in (">", "<", ">=", "<=")
            and isinstance(node.rhs, pp.NumberLiteral)
        ):
            bounds = value_range(node.lhs)
            if bounds is not None:
                low, high = bounds
                c, op = node.rhs.val, str(node.op)
                always = {">": low > c, ">=": low >= c, "<": high < c, "<=": high <= c}[op]
                never = {">": high <= c, ">=": high < c, "<": low >= c, "<=": low > c}[op]
                if always or never:
                    found.append((str(node), "always holds" if always else "never holds"))
        for child in _children(node):
            visit(child)

    visit(expr)
    return found
