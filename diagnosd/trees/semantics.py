"""Checks a tree beyond its shape: ids, params, durations, PromQL, and agreement with the catalog.

Each check yields (data path, message) so the loader can point at the line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from diagnosd.errors import Problem
from diagnosd.trees import promql
from diagnosd.trees.catalog import Catalog
from diagnosd.trees.model import (
    DURATION,
    LABEL_NAME,
    AnyNode,
    CheckNode,
    Compare,
    Tree,
    walk,
)

Loc = tuple[str | int, ...]
Found = Iterator[tuple[Loc, str]]


def check_tree(tree: Tree, stem: str, catalog: Catalog | None) -> Found:
    if tree.id != stem:
        yield ("id",), f"tree id {tree.id!r} must match its file name {stem!r}"
    yield from _check_target(tree)
    yield from _check_params(tree)
    yield from _check_ids(tree)
    params = {name: p.default for name, p in tree.params.items()}
    yield from _check_query(tree, ("detect", "query"), tree.detect.query, params)
    yield from _check_compare(tree, ("detect", "compare"), tree.detect.compare)
    if tree.traffic is not None:
        yield from _check_query(tree, ("traffic", "query"), tree.traffic.query, params)
        yield from _check_number(tree, ("traffic", "min"), tree.traffic.min)
    for loc, node in node_locations(tree):
        if isinstance(node, CheckNode):
            yield from _check_check(tree, loc, node, params)
    yield from _check_explains(tree)
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


def _check_ids(tree: Tree) -> Found:
    seen: dict[str, Loc] = {}
    causes: dict[str, Loc] = {}
    for loc, node in node_locations(tree):
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
    and never in a circle (a cause that explains itself, however indirectly, explains nothing)."""
    concluding: dict[str, AnyNode] = {}
    # Whether a node's branch (the node or a check above it) compares a ratio: what `slack` sizes.
    ratio_branch: dict[str, bool] = {}
    for loc, node in node_locations(tree):
        conclusion = getattr(node, "conclusion", None)
        if conclusion is not None:
            concluding.setdefault(conclusion.cause, node)
        parent = ratio_branch.get(_parent_id(tree, loc) or "", False)
        ratio_branch[node.id] = parent or (isinstance(node, CheckNode) and node.compare.operator.startswith("ratio_"))
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
            if item.slack is None:
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
    yield from _check_query(tree, (*loc, "query"), node.query, params)
    yield from _check_compare(tree, (*loc, "compare"), node.compare)
    if node.value_label is not None and not LABEL_NAME.match(node.value_label):
        yield (*loc, "value_label"), f"{node.value_label!r} is not a label name"
    for index, context in enumerate(node.context):
        yield from _check_query(tree, (*loc, "context", index, "query"), context.query, params)


def _check_query(tree: Tree, loc: Loc, text: str, params: Mapping[str, float | str]) -> Found:
    unknown = sorted(promql.refs(text) - set(params) - {promql.TARGET_REF})
    if unknown:
        yield loc, f"unknown param{'s' if len(unknown) > 1 else ''}: {', '.join('$' + u for u in unknown)}"
        return
    rendered = promql.substitute(text, params, tree.target)
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
