"""No boolean folded into arithmetic: a `bool` comparison gating a value is written as all: / any:."""

from __future__ import annotations

import pytest

from diagnosd.daemon import compose
from diagnosd.trees import promql
from diagnosd.trees.model import queries
from diagnosd.trees.semantics import bool_arithmetic
from tests.conftest import RULES


@pytest.mark.parametrize(
    "query",
    [
        "avg(util) + on (pod) (100 * (1 - (max(e2e) >= bool 1.5)))",  # the old gpu_underutilized detect
        "(1 - avg(graph)) * on (pod) (max(running) < bool 8)",
        "(a >= bool 1) * (b >= bool 1)",
        "clamp_max((a >= bool b) + (min_over_time(c[5m:1m]) > bool 0), 1)",
        "ratio * on (pod) (max(kv) or max(usage) >= bool 0.9)",
    ],
)
def test_a_bool_gating_a_value_is_found(query: str) -> None:
    assert bool_arithmetic(promql.parse(query))


@pytest.mark.parametrize(
    "query",
    [
        "max(restarts) > bool 0",  # a yes/no check on its own (unit bool)
        "sum(util < bool 20)",  # a count: idle GPUs
        "sum(a != bool 4) + sum(b != bool 5)",  # counts added: ports down
        "max(0 * kube_pod_created + on (namespace) group_left () (replicas == bool 0))",  # a join carries it over
        "avg(x) * 100",
    ],
)
def test_counts_joins_and_plain_values_pass(query: str) -> None:
    assert bool_arithmetic(promql.parse(query)) == []


def test_no_shipped_rule_folds_a_bool_into_a_judged_value() -> None:
    rules = compose.load(RULES)
    found = []
    for tree in rules.ruleset.trees.values():
        values = {name: p.default for name, p in tree.params.items()}
        for key, text in queries(tree):
            expr = promql.parse(promql.substitute(text, values, tree.target))
            found += [f"{tree.id}.{key}: {b}" for b in bool_arithmetic(expr)]
    assert found == []
