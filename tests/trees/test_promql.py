"""trees/promql.answers_per_target: which answers carry the target labels on every sample (a
narrowed walk reads those alike over any scope), after Prometheus' own label rules."""

from __future__ import annotations

import pytest

from diagnosd.daemon import compose
from diagnosd.engine import params as P
from diagnosd.topology import DEFAULT
from diagnosd.trees import promql
from diagnosd.trees.model import queries

TARGET = ("namespace", "pod")


@pytest.mark.parametrize(
    ("query", "per_target"),
    [
        ("vllm:num_requests_waiting", True),
        ("rate(x_total[5m])", True),
        ("max by (namespace, pod) (x)", True),
        ("max by (pod) (x)", False),
        ("sum(x)", False),
        ("count(x < 10)", False),
        ("sum without (gpu) (x)", True),
        ("sum without (pod) (x)", False),
        ("topk(1, x)", True),
        ("histogram_quantile(0.9, sum by (le, namespace, pod) (rate(x_bucket[5m])))", True),
        ("histogram_quantile(0.9, sum by (le) (rate(x_bucket[5m])))", False),
        ("quantile_over_time(1 - 0.8, x[5m])", True),
        ("max_over_time(max by (namespace, pod) (x)[30m:1m])", True),
        ("scalar(x)", False),
        ("vector(1)", False),
        ("2 * x", True),
        ("x > 0.9", True),
        ("-(x)", True),
        ("x / on (namespace, pod) y", True),
        ("x / on (pod) y", False),  # one-to-one `on`: the matching labels alone
        ("x / ignoring (gpu) y", True),
        ("x / ignoring (pod) y", False),
        ("x / on () group_left () max(y)", True),  # the left side's labels
        ("sum(y) * on () group_right () x", True),
        ("sum by (model_id) (x) * on (model_id) group_left (pod, namespace) y", True),
        ("sum by (model_id) (x) * on (model_id) group_left (pod) y", False),
        ('label_replace(sum by (namespace) (x), "pod", "$1", "p", "(.+)")', True),
        ("x and on () sum(y)", True),
        ("x unless y", True),
        ("x or sum(y)", False),
        ("x or 0 * y", True),
        ("x or vector(0)", False),
    ],
)
def test_which_answers_carry_the_target_labels(query: str, per_target: bool) -> None:
    assert promql.answers_per_target(promql.parse(query), TARGET) is per_target


def test_every_shipped_query_answers_per_target() -> None:
    """So that every shipped tree is walked narrowed in rounds: a query added that may answer for
    no target makes its tree walk the whole scope (correct, and costlier), and shows here."""
    rules = compose.load()
    fleetwide = []
    for tree in rules.ruleset.trees.values():
        values = P.effective(tree)
        for key, text in queries(tree):
            expanded = promql.substitute(text, values, tree.target, DEFAULT)
            if not promql.answers_per_target(promql.parse(expanded), tree.target):
                fleetwide.append(f"{tree.id}/{key}")
    assert fleetwide == []
    assert len(rules.ruleset.trees) == 20
