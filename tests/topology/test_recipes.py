"""Topology recipes as text: expansion, validation at load, and which selectors the scope narrows."""

from __future__ import annotations

import promql_parser as pp
import pytest

from diagnosd.engine.rewrite import ScopeMatcher, rewrite
from diagnosd.topology import RECIPES, UNSCOPED_MARK, Level, Topology, expand, level_of, recipe_refs
from diagnosd.trees import promql
from diagnosd.trees.model import Tree
from diagnosd.trees.semantics import check_tree

TEXT = {"zh": "中", "en": "en"}


def selectors(text: str) -> dict[str, dict[str, tuple[str, str]]]:
    found: dict[str, dict[str, tuple[str, str]]] = {}

    def visit(node: pp.Expr) -> None:
        if isinstance(node, pp.VectorSelector) and node.name:
            found.setdefault(node.name, {}).update({m.name: (str(m.op), m.value) for m in node.matchers.matchers})

    pp.walk(pp.parse(text), pre_visit=visit)
    return found


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_expands_to_promql_that_parses(name: str) -> None:
    recipe = RECIPES[name]
    if recipe.matchers:
        text = f"vllm:x{{@{name}}}"
    elif recipe.takes_expr:
        text = f"sum by (node) (@{name}(rate(node_x_total[5m])))"
    else:
        text = f"count by (namespace, pod) (@{name})"
    expanded = promql.substitute(text, {}, ["namespace", "pod"])
    assert "@" not in expanded
    promql.parse(expanded)


def test_an_expression_recipe_is_one_operand() -> None:
    expanded = expand("@pod_node * on (node) group_left () x")
    # `or` inside @pod_node binds looser than `*`: the recipe comes parenthesised.
    expr = pp.parse(expanded)
    assert isinstance(expr, pp.BinaryExpr)
    assert str(expr.op) == "*"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sum(@no_such_recipe)", "unknown recipe @no_such_recipe"),
        ("sum(@node)", "@node takes an expression"),
        ("sum(@node())", "needs an expression"),
        ("@unscoped(rate(x[5m])", "unbalanced"),
    ],
)
def test_bad_references_are_load_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        expand(text)
    tree = Tree.model_validate(
        {
            "id": "queue_backlog",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": {"title": TEXT, "query": text, "compare": {"above": 1}},
            "nodes": [
                {
                    "id": "other",
                    "title": TEXT,
                    "manual": TEXT,
                    "conclusion": {"cause": "other", "title": TEXT, "remediation": [TEXT]},
                }
            ],
        }
    )
    problems = [message_ for _, message_ in check_tree(tree, "queue_backlog", None)]
    assert any(message in p for p in problems), problems


def test_references_inside_strings_are_text() -> None:
    assert recipe_refs('x{a="@pod_node"} + @pod_node') == {"pod_node"}
    assert expand('x{a="@nothing"}') == 'x{a="@nothing"}'


def test_canary_by_label_or_by_pod_name_pattern() -> None:
    assert expand("x{@canary}") == 'x{track="canary"}'
    assert expand("x{@stable}") == 'x{track!="canary"}'
    by_pod = Topology(canary_pod_pattern=".+-canary-.+")
    assert expand("x{@canary}", by_pod) == 'x{pod=~".+-canary-.+"}'
    assert expand("x{@stable}", by_pod) == 'x{pod!~".+-canary-.+"}'
    assert expand("x{@canary}", Topology(canary_label="version", canary_value="next")) == 'x{version="next"}'


def test_levels() -> None:
    assert level_of("vllm:num_requests_waiting") is Level.TARGET
    assert level_of("kube_pod_info") is Level.TARGET
    assert level_of("node_infiniband_state_id") is Level.NODE
    assert level_of("kube_node_info") is Level.NODE
    assert level_of("kube_replicaset_owner") is Level.WORKLOAD
    assert level_of("kube_horizontalpodautoscaler_info") is Level.AUTOSCALER


SCOPE = [ScopeMatcher("namespace", ("prod",), strict=False), ScopeMatcher("diagnosd_test", ("t1",), strict=True)]


def test_the_scope_narrows_target_series_only_and_strict_labels_everything() -> None:
    query = (
        "sum by (namespace, pod) (rate(vllm:x_total[5m])) * on (namespace, pod) group_left () "
        "max by (namespace, pod) (kube_pod_info * on (node) group_left () max by (node) (node_load1)) "
        "+ on (namespace) group_left () max by (namespace) (kube_horizontalpodautoscaler_spec_max_replicas)"
    )
    found = selectors(rewrite(query, {}, SCOPE, ["namespace", "pod"]))
    assert found["vllm:x_total"]["namespace"] == ("MatchOp.Re", "prod|")
    for name in ("node_load1", "kube_horizontalpodautoscaler_spec_max_replicas"):
        assert "namespace" not in found[name]
        assert found[name]["diagnosd_test"] == ("MatchOp.Equal", "t1")
    # kube-state-metrics pod series are scoped by the pod's labels, plain or exported_*.
    assert found["kube_pod_info"]["exported_namespace"] == ("MatchOp.Re", "prod|")
    assert found["kube_pod_info"]["namespace"] == ("MatchOp.Re", "prod|")


def test_unscoped_parts_keep_strict_labels_and_lose_the_mark() -> None:
    text = promql.substitute(
        "sum by ($target) (rate(spend[5m])) / ignoring ($target) group_left () @unscoped(sum(rate(spend[5m])))",
        {},
        ["model"],
    )
    assert UNSCOPED_MARK in text
    out = rewrite(text, {}, [ScopeMatcher("model", ("gpt-4o",), strict=False), SCOPE[1]], ["model"])
    assert UNSCOPED_MARK not in out
    inner = [m for m in _all_selectors(out)]
    assert [("model" in m, m["diagnosd_test"]) for m in inner] == [(True, "t1"), (False, "t1")]


def _all_selectors(text: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []
    pp.walk(
        pp.parse(text),
        pre_visit=lambda n: (
            found.append({m.name: m.value for m in n.matchers.matchers}) if isinstance(n, pp.VectorSelector) else None
        ),
    )
    return found


def test_a_parenthesis_inside_a_string_does_not_close_a_recipe() -> None:
    text = 'max by (node) (@node(label_replace(x, "dir", ")", "", "")))'
    expanded = expand(text)
    assert '")"' in expanded
    pp.parse(expanded)  # the recipe took the whole label_replace, so the result still parses
