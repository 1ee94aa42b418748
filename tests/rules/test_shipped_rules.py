"""The shipped rules: they load, they carry the catalog, and their series tests pass on a real Prometheus."""

from __future__ import annotations

from functools import cache

import pytest
import yaml

from diagnosd.rulestest.runner import CaseResult, collect
from diagnosd.trees import CheckNode, load_rules, walk
from tests.conftest import REPO, RULES

RULESET = load_rules(RULES)
TREES = list(RULESET.trees)


@cache
def results() -> dict[str, list[CaseResult]]:
    by_tree: dict[str, list[CaseResult]] = {}
    for result in collect(RULES):
        by_tree.setdefault(result.tree, []).append(result)
    return by_tree


def test_every_catalog_symptom_has_a_tree() -> None:
    assert [s.id for s in RULESET.catalog.symptoms] == TREES


@pytest.mark.parametrize("tree_id", TREES)
def test_series_tests_pass(tree_id: str) -> None:
    outcome = results().get(tree_id, [])
    assert outcome, f"{tree_id}: no test ran"
    failures = [f"{r.name}: {f}" for r in outcome for f in r.failures]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("tree_id", TREES)
def test_every_data_cause_is_a_top_cause_somewhere_and_a_healthy_case_exists(tree_id: str) -> None:
    spec = yaml.safe_load((RULES / f"{tree_id}.test.yaml").read_text())
    expectations = [e for case in spec["tests"] for e in case["expect"]]
    # A cause shown as a consequence of another (`explained`) is demonstrated too.
    tops = {e.get("top_cause") for e in expectations} | {c for e in expectations for c in e.get("explained", {})}
    tree = RULESET.trees[tree_id]
    decided = {n.conclusion.cause for n, _ in walk(list(tree.nodes)) if isinstance(n, CheckNode) and n.conclusion}
    # A fleet-level check (no target labels) is demonstrated by a matched fleet-level result.
    cause_of = {
        n.id: n.conclusion.cause for n, _ in walk(list(tree.nodes)) if isinstance(n, CheckNode) and n.conclusion
    }
    tops |= {cause_of.get(c) for case in spec["tests"] for c, v in case.get("fleet", {}).items() if v == "matched"}
    assert sorted(decided - tops) == []
    healthy = [case for case in spec["tests"] if all(e.get("no_cause") for e in case["expect"])]
    assert healthy, f"{tree_id}: no healthy case (every target no_cause)"


@pytest.mark.parametrize("tree_id", TREES)
def test_catalog_kinds_m_c_d_are_decided_from_data(tree_id: str) -> None:
    entry = RULESET.catalog.symptom(tree_id)
    assert entry is not None
    concluding = {
        n.conclusion.cause: n for n, _ in walk(list(RULESET.trees[tree_id].nodes)) if getattr(n, "conclusion", None)
    }  # type: ignore[union-attr]
    manual = [c.id for c in entry.causes if c.kind[0] in "MCD" and not isinstance(concluding[c.id], CheckNode)]
    assert manual == []


def test_docs_catalog_is_current() -> None:
    from diagnosd.generate import catalogdoc

    expected = catalogdoc.render(RULESET)
    current = (REPO / "docs" / "catalog.md").read_text(encoding="utf-8")
    assert current == expected, "docs/catalog.md is stale: run `diagnosd rules catalog --out docs/catalog.md`"
