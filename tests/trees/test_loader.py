"""The loader: a good tree loads; every problem of a bad one is reported at once, located exactly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from diagnosd.errors import RulesError
from diagnosd.trees import CheckNode, ManualNode, load_rules
from tests.conftest import REPO

FIXTURE = REPO / "tests" / "fixtures" / "rules"


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    target = tmp_path / "rules"
    shutil.copytree(FIXTURE, target)
    (target / "queue_backlog.test.yaml").unlink()
    return target


def problems(directory: Path) -> list[str]:
    with pytest.raises(RulesError) as caught:
        load_rules(directory)
    return [str(p) for p in caught.value.problems]


def edit(directory: Path, old: str, new: str) -> Path:
    path = directory / "queue_backlog.yaml"
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return path


def test_good_tree_loads_in_seed_order(rules_dir: Path) -> None:
    ruleset = load_rules(rules_dir)
    tree = ruleset.trees["queue_backlog"]
    assert [n.id for n in tree.nodes] == ["kv_pool_full", "requests_not_released"]
    assert isinstance(tree.nodes[0], CheckNode)
    assert isinstance(tree.nodes[1], ManualNode)
    assert tree.nodes[0].children[0].id == "kv_growth"


def test_unknown_key_and_missing_key_reported_together(rules_dir: Path) -> None:
    path = edit(rules_dir, "    compare: {above: $kv_full}\n", "    compare: {above: $kv_full}\n    colour: red\n")
    edit(rules_dir, "  title: {zh: 排队请求数, en: Waiting requests}\n", "")
    assert problems(rules_dir) == [
        f"{path}:8: detect.title: required key is missing",
        f"{path}:16: nodes[0](kv_pool_full).colour: unknown key",
    ]


def test_promql_that_does_not_parse_names_file_line_and_node(rules_dir: Path) -> None:
    path = edit(
        rules_dir,
        "query: max by ($target) (vllm:kv_cache_usage_perc)\n    compare: {above",
        "query: max by ($target) (vllm:kv_cache_usage_perc\n    compare: {above",
    )
    (found,) = problems(rules_dir)
    assert found.startswith(f"{path}:15: nodes[0](kv_pool_full).query: PromQL does not parse: ")
    assert "(query: max by (namespace, pod) (vllm:kv_cache_usage_perc)" in found


def test_unknown_param_duplicate_id_and_catalog_gap_all_at_once(rules_dir: Path) -> None:
    path = edit(rules_dir, "compare: {above: $kv_full}", "compare: {above: $kv_ful}")
    edit(rules_dir, "- id: kv_growth", "- id: kv_pool_full")
    edit(rules_dir, "cause: requests_not_released", "cause: requests_released")
    assert problems(rules_dir) == [
        f"{path}:22: nodes[0](kv_pool_full).children[0](kv_pool_full).id: "
        "node id 'kv_pool_full' is used twice in this tree",
        f"{path}:16: nodes[0](kv_pool_full).compare.above: unknown param $kv_ful",
        f"{path}:12: nodes: catalog causes missing from the tree: requests_not_released",
    ]


def test_a_node_may_not_take_the_name_of_the_trees_own_queries(rules_dir: Path) -> None:
    # The engine keys the detect's and the traffic floor's queries "detect" and "traffic", beside
    # the nodes' ids: a node named so would take the detect's answers for its own.
    path = edit(rules_dir, "- id: kv_growth", "- id: detect")
    assert problems(rules_dir) == [
        f"{path}:22: nodes[0](kv_pool_full).children[0](detect).id: "
        "node id 'detect' is reserved: it names the tree's own detect query"
    ]


def test_derived_check_needs_a_caveat(rules_dir: Path) -> None:
    path = edit(rules_dir, "    compare: {above: $kv_full}\n", "    compare: {above: $kv_full}\n    basis: derived\n")
    assert problems(rules_dir) == [
        f"{path}:13: nodes[0](kv_pool_full): Value error, a derived check needs conclusion.caveat: "
        "what the inference cannot see"
    ]


def test_backslash_in_a_string_is_refused(rules_dir: Path) -> None:
    path = edit(
        rules_dir,
        "max by ($target) (vllm:kv_cache_usage_perc)\n    compare: {above",
        "max by ($target) (vllm:kv_cache_usage_perc{model_name=~'a\\\\.b'})\n    compare: {above",
    )
    assert problems(rules_dir) == [
        f"{path}:15: nodes[0](kv_pool_full).query: string 'a\\\\.b' holds a backslash, quote or newline; "
        "write regex escapes as classes ([.])"
    ]


def test_subquery_without_step_is_refused(rules_dir: Path) -> None:
    path = edit(
        rules_dir,
        "max by ($target) (vllm:kv_cache_usage_perc)\n    compare: {above",
        "max by ($target) (max_over_time(vllm:kv_cache_usage_perc[1h:]))\n    compare: {above",
    )
    assert problems(rules_dir) == [
        f"{path}:15: nodes[0](kv_pool_full).query: a subquery needs an explicit step ([1h:1m], not [1h:]): "
        "queries are reprinted from their parsed form"
    ]


def test_invalid_yaml_and_wrong_file_name(rules_dir: Path) -> None:
    (rules_dir / "queue_backlog.yaml").rename(rules_dir / "ttft_high.yaml")
    (rules_dir / "broken.yaml").write_text("id: [unclosed\n")
    found = problems(rules_dir)
    assert found[0].startswith(f"{rules_dir / 'broken.yaml'}:2: invalid YAML: ")
    assert found[1:] == [
        f"{rules_dir / 'ttft_high.yaml'}:1: id: tree id 'queue_backlog' must match its file name 'ttft_high'",
    ]


def test_compare_needs_exactly_one_operator_and_a_baseline_for_ratios(rules_dir: Path) -> None:
    path = edit(rules_dir, "compare: {ratio_above: 1.2, baseline: 1d}", "compare: {ratio_above: 1.2}")
    edit(rules_dir, "compare: {above: $kv_full}", "compare: {above: $kv_full, below: 1}")
    assert problems(rules_dir) == [
        f"{path}:16: nodes[0](kv_pool_full).compare: Value error, exactly one of above, below, ratio_above, "
        "ratio_below, delta_above, delta_below is required, got ['above', 'below']",
        f"{path}:25: nodes[0](kv_pool_full).children[0](kv_growth).compare: Value error, ratio_above compares "
        "with a baseline: set 'baseline' (e.g. 1d)",
    ]


def test_explains_names_causes_of_the_tree(rules_dir: Path) -> None:
    new = "cause: kv_pool_full\n      explains: [requests_not_released, queueing]\n"
    path = edit(rules_dir, "cause: kv_pool_full\n", new)
    # (kv_pool_full compares no baseline on its branch: its explanation without slack is refused too)
    (found,) = [p for p in problems(rules_dir) if "queueing" in p]
    assert found.startswith(f"{path}:19: nodes[0](kv_pool_full).conclusion.explains[1].cause: ")
    assert "no node of this tree concludes 'queueing'" in found


def test_explains_as_ids_or_with_a_slack_loads(rules_dir: Path) -> None:
    edit(rules_dir, "cause: kv_pool_full\n", "cause: kv_pool_full\n      explains: [requests_not_released]\n")
    # A change, not a standing level: it may explain without a size check.
    edit(rules_dir, "compare: {above: $kv_full}", "compare: {delta_above: 0.2, baseline: 1d}")
    tree = load_rules(rules_dir).trees["queue_backlog"]
    node = tree.nodes[0]
    assert isinstance(node, CheckNode)
    assert node.conclusion is not None
    assert [(e.cause, e.slack) for e in node.conclusion.explains] == [("requests_not_released", None)]


def test_a_manual_node_cannot_explain_and_slack_needs_ratio_checks(rules_dir: Path) -> None:
    path = edit(
        rules_dir,
        "cause: requests_not_released\n",
        "cause: requests_not_released\n      explains: [kv_pool_full]\n",
    )
    edit(
        rules_dir,
        "cause: kv_pool_full\n",
        "cause: kv_pool_full\n      explains: [{cause: requests_not_released, slack: 0.5}]\n",
    )
    found = problems(rules_dir)
    assert any("kv_pool_full).conclusion.explains[0].slack: slack 0.5 must be at least 1" in p for p in found)
    assert any("has no ratio_above / ratio_below check on its branch" in p for p in found)
    assert any(p.startswith(f"{path}:") and "only a check's conclusion can explain other causes" in p for p in found)


def test_explanations_in_a_circle_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "rules"
    shutil.copytree(REPO / "rules", target)
    path = target / "ttft_high.yaml"
    text = path.read_text()
    anchor = "          explains: [{cause: batch_too_large, slack: $step_slack}]\n"
    assert text.count(anchor) == 1
    circle = anchor.replace("}]", "}, {cause: prompt_inflation, slack: $step_slack}]")
    path.write_text(text.replace(anchor, circle))
    found = problems(target)
    assert any("explanations go in a circle: " in p and "prompt_inflation" in p for p in found), found


def test_a_cause_cannot_explain_itself(rules_dir: Path) -> None:
    edit(rules_dir, "cause: kv_pool_full\n", "cause: kv_pool_full\n      explains: [kv_pool_full]\n")
    (found,) = problems(rules_dir)
    assert "cause 'kv_pool_full' cannot explain itself" in found
