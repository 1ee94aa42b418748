"""Every cause the rules decide from data has a scenario that makes the rules find it.

The data-decided causes are read from the loaded rules (the conclusions of check nodes, not of
manual ones), so a new check without a scenario fails here; test_scenarios.py proves that each
scenario's expectation really holds on a real Prometheus.
"""

from __future__ import annotations

from diagnosd.daemon import compose
from diagnosd.sim import scenario
from diagnosd.trees.model import CheckNode, walk


def data_decided() -> set[tuple[str, str]]:
    """(tree, cause) for every check node of the shipped rules that concludes a cause."""
    return {
        (tree.id, node.conclusion.cause)
        for tree in compose.load().ruleset.trees.values()
        for node, _ in walk(list(tree.nodes))
        if isinstance(node, CheckNode) and node.conclusion is not None
    }


def expected() -> set[tuple[str, str]]:
    """(symptom, cause) for every cause some shipped scenario expects, of a target or fleet-wide."""
    return {
        (e.symptom, c) for name in scenario.names() for e in scenario.load(name).expect for c in (*e.causes, *e.fleet)
    }


def test_every_data_decided_cause_has_a_scenario() -> None:
    missing = data_decided() - expected()
    assert not missing, f"data-decided causes without a scenario: {sorted(missing)}"


def test_scenarios_expect_only_causes_the_rules_decide_from_data() -> None:
    unknown = expected() - data_decided()
    assert not unknown, f"scenarios expect causes no check concludes: {sorted(unknown)}"


def test_the_data_decided_causes_come_from_check_nodes_only() -> None:
    """Manual branches (no query) are not data-decided: a scenario cannot show them."""
    decided = data_decided()
    assert ("nccl_failure", "ib_link_down") in decided
    assert ("nccl_failure", "init_hang_wrong_iface") not in decided
    assert len(decided) > 50
