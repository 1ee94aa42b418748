"""No check that cannot fail: the detect asked again, a value compared with itself, a 0/1 value
its threshold cannot cut. Each is a load error, and the shipped rules have none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from diagnosd.trees.model import Tree
from diagnosd.trees.semantics import check_cannot_fail

RULES = Path(__file__).resolve().parents[2] / "rules"
TEXT = {"zh": "中", "en": "en"}
SPREAD = "max by ($target) (avg_over_time(used[$window])) - min by ($target) (avg_over_time(used[$window]))"


def tree(*nodes: dict[str, Any], detect: dict[str, Any] | None = None) -> Tree:
    return Tree.model_validate(
        {
            "id": "expert_imbalance",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "params": {"window": {"default": "10m", "doc": "d"}, "gap": {"default": 0.5, "doc": "d"}},
            "detect": detect or {"title": TEXT, "query": SPREAD, "compare": {"above": "$gap"}},
            "nodes": list(nodes),
        }
    )


def check(id_: str, query: str, compare: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": id_, "title": TEXT, "query": query, "compare": compare, **extra}


def problems(t: Tree) -> list[str]:
    params = {name: p.default for name, p in t.params.items()}
    return [f"{'.'.join(map(str, loc))}: {message}" for loc, message in check_cannot_fail(t, params)]


def test_the_detect_asked_again_is_refused_whatever_its_spacing() -> None:
    spaced = "max by ($target)   (avg_over_time(used[$window]))\n  - min by ($target) (avg_over_time( used[10m] ))"
    found = problems(tree(check("gpu_memory_skew", spaced, {"above": 0.5})))
    assert len(found) == 1
    assert found[0].startswith("nodes.0: the check repeats the detect's own comparison")


def test_a_weaker_threshold_on_the_detect_query_cannot_fail_either() -> None:
    assert problems(tree(check("loose", SPREAD, {"above": 0.3})))
    # A stricter one can fail (a gap of 0.6 is past the detect, not past 0.7): allowed.
    assert problems(tree(check("strict", SPREAD, {"above": 0.7}))) == []
    # The other direction on the same query can fail too.
    assert problems(tree(check("small", SPREAD, {"below": 0.9}))) == []


def test_a_child_repeating_its_parent_is_refused() -> None:
    child = check("again", "sum by ($target) (x)", {"above": 3})
    parent = check("parent", "sum by ($target) (x)", {"above": 5}, children=[child])
    (found,) = problems(tree(parent))
    assert "repeats parent's own comparison" in found


def test_a_condition_of_an_any_detect_can_still_fail() -> None:
    detect = {
        "title": TEXT,
        "any": [
            {"id": "memory", "title": TEXT, "query": SPREAD, "compare": {"above": "$gap"}},
            {"id": "util", "title": TEXT, "query": "max by ($target) (util)", "compare": {"above": 40}},
        ],
    }
    assert problems(tree(check("gpu_memory_skew", SPREAD, {"above": "$gap"}), detect=detect)) == []
    detect["all"] = detect.pop("any")
    assert problems(tree(check("gpu_memory_skew", SPREAD, {"above": "$gap"}), detect=detect))


@pytest.mark.parametrize(
    ("query", "compare", "says"),
    [
        ("sum by ($target) (x) > bool 0 >= 0", {"above": 0.5}, "always holds"),
        ("sum by ($target) (x) > sum by ($target) (x)", {"above": 0}, "compares a value with itself"),
        ("max by ($target) (x > bool 3)", {"above": 1}, "can never match"),
        ("max by ($target) (x > bool 3)", {"below": 2}, "always matches"),
        ("clamp(sum by ($target) (x), 0, 1)", {"above": -1}, "always matches"),
    ],
)
def test_a_query_whose_answer_is_settled_by_its_shape_is_refused(
    query: str, compare: dict[str, Any], says: str
) -> None:
    found = problems(tree(check("c", query, compare)))
    assert any(says in f for f in found), found


def test_yes_no_checks_that_can_go_either_way_are_fine() -> None:
    assert problems(tree(check("flag", "max by ($target) (x > bool 3)", {"above": 0.5}, unit="bool"))) == []
    # A count of 0/1 values is a number, not a 0/1.
    assert problems(tree(check("count", "sum(x < bool 20)", {"above": 0}))) == []


# The shipped trees: every YAML in rules/ but the series tests, the catalog and the metric aliases.
SHIPPED = sorted(
    p for p in RULES.glob("*.yaml") if not p.name.endswith(".test.yaml") and p.stem not in ("catalog", "metrics")
)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_no_shipped_check_cannot_fail(path: Path) -> None:
    assert problems(Tree.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))) == []


def test_every_shipped_tree_is_checked() -> None:
    assert len(SHIPPED) == 20
