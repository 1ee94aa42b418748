"""The engine with a fake source: verdicts, reasons, ranking, skipping, and the query budget."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from diagnosd.engine import Evaluator, Scope
from diagnosd.errors import ParamError, QueryRejected, SourceTimeout
from diagnosd.findings import Reason, Verdict
from diagnosd.sources.base import Sample
from diagnosd.trees.model import Tree
from tests.engine.fakes import FakeSource, samples

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
TEXT = {"zh": "中", "en": "en"}


def conclusion(cause: str) -> dict[str, Any]:
    return {"cause": cause, "title": TEXT, "remediation": [TEXT]}


def make_tree(*nodes: dict[str, Any], **extra: Any) -> Tree:
    return Tree.model_validate(
        {
            "id": "queue_backlog",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "params": {"waiting": {"default": 10, "doc": "d"}, "seqs": {"default": 256, "doc": "d", "assumed": True}},
            "detect": {"title": TEXT, "query": "max by ($target) (waiting)", "compare": {"above": "$waiting"}},
            "nodes": list(nodes),
            **extra,
        }
    )


def check(id_: str, metric: str, compare: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": id_, "title": TEXT, "query": f"max by ($target) ({metric})", "compare": compare, **extra}


async def run(tree: Tree, source: FakeSource, **kwargs: Any) -> Any:
    return await Evaluator(source).diagnose(tree, kwargs.pop("scope", None), AT, **kwargs)


async def test_query_count_does_not_grow_with_targets() -> None:
    tree = make_tree(
        check("a", "kv", {"above": 0.9}, conclusion=conclusion("kv_full")), check("b", "running", {"above": 200})
    )
    counts = []
    for n in (3, 300):
        pods = {f"p{i}": 20.0 for i in range(n)}
        source = FakeSource(
            {
                "waiting": samples(pods),
                "kv": samples(dict.fromkeys(pods, 0.95)),
                "running": samples(dict.fromkeys(pods, 10.0)),
            }
        )
        diagnosis = await run(tree, source)
        assert len(diagnosis.targets) == n
        assert all(t.root_causes[0].cause == "kv_full" for t in diagnosis.targets)
        counts.append(len(source.queries))
    assert counts == [3, 3]


async def test_each_distinct_query_runs_once_and_baselines_run_at_the_offset() -> None:
    tree = make_tree(
        check("a", "kv", {"ratio_above": 1.5, "baseline": "1d"}, conclusion=conclusion("kv_full")),
        check("a2", "kv", {"above": 0.5}),
    )
    source = FakeSource(
        {
            "waiting": samples({"p": 20}),
            "kv": lambda at: samples({"p": 0.9 if at == AT else 0.3}),
        }
    )
    diagnosis = await run(tree, source)
    assert sorted(at for _, at in source.queries) == [AT - timedelta(days=1), AT, AT]
    evidence = diagnosis.targets[0].root_causes[0].evidence[-1]
    assert (evidence.value, evidence.baseline, evidence.baseline_at) == (0.9, 0.3, AT - timedelta(days=1))
    assert evidence.compared == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (QueryRejected("HTTP 400 bad_data: parse error", url="u"), Reason.QUERY_ERROR),
        (SourceTimeout("no answer within 10s", url="u"), Reason.TIMEOUT),
        ([Sample({"namespace": "prod", "pod": "p"}, math.nan)], Reason.ZERO_OVER_ZERO),
        ([Sample({"namespace": "prod", "pod": "other"}, 1.0)], Reason.NO_DATA),
    ],
)
async def test_what_could_not_be_looked_at_is_unknown_never_clear(answer: Any, reason: Reason) -> None:
    tree = make_tree(check("a", "kv", {"above": 0.9}, conclusion=conclusion("kv_full")))
    source = FakeSource({"waiting": samples({"p": 20}), "kv": answer})
    target = next(t for t in (await run(tree, source)).targets if t.labels["pod"] == "p")
    (result,) = target.checks
    assert (result.verdict, result.reason) == (Verdict.UNKNOWN, reason)
    assert target.root_causes == ()


async def test_metric_absent_is_told_apart_from_no_data_and_noted() -> None:
    tree = make_tree(check("a", "vllm:kv_cache_usage_perc", {"above": 0.9}))
    source = FakeSource({"waiting": samples({"p": 20})})
    diagnosis = await run(tree, source)
    (result,) = diagnosis.targets[0].checks
    assert (result.verdict, result.reason) == (Verdict.UNKNOWN, Reason.METRIC_ABSENT)
    (note,) = diagnosis.notes  # one line for the whole family, with how to get it
    assert note.startswith("no vLLM metrics on this Prometheus (this tree reads 1: vllm:kv_cache_usage_perc)")
    assert "/metrics" in note


async def test_absent_notes_name_a_family_once_and_never_an_engine_alternative() -> None:
    query = "vllm:num_requests_running or sglang:num_running_reqs or vllm:kv_cache_usage_perc"
    tree = make_tree(check("a", query, {"above": 0.9}), check("b", "DCGM_FI_DEV_GPU_UTIL or DCGM_X", {"above": 1}))
    source = FakeSource({"waiting": samples({"p": 20}), "vllm:num_requests_running": samples({"p": 1})})
    notes = (await run(tree, source)).notes
    assert not any("SGLang" in n or "vLLM" in n for n in notes)  # vLLM is there: SGLang is not missing
    (dcgm,) = notes
    assert dcgm.startswith("no dcgm-exporter metrics on this Prometheus (this tree reads 2: ")


async def test_a_scraped_exporter_lacking_one_name_is_no_absent_family() -> None:
    tree = make_tree(check("a", "sglang:startup_time_seconds", {"above": 60}))
    source = FakeSource({"waiting": samples({"p": 20})}, present={"waiting", "sglang:num_running_reqs"})
    assert (await run(tree, source)).notes == ()  # the check itself says which name is missing


async def test_underscore_spelling_is_found_and_queried() -> None:
    tree = make_tree(check("a", "vllm:kv_cache_usage_perc", {"above": 0.9}, conclusion=conclusion("kv_full")))
    source = FakeSource({"waiting": samples({"p": 20}), "vllm_kv_cache_usage_perc": samples({"p": 0.95})})
    diagnosis = await run(tree, source)
    assert diagnosis.targets[0].root_causes[0].cause == "kv_full"
    assert any("vllm_kv_cache_usage_perc{" in q for q, _ in source.queries)


async def test_missing_baseline_is_its_own_reason() -> None:
    tree = make_tree(check("a", "kv", {"ratio_above": 1.5, "baseline": "1d"}))
    source = FakeSource({"waiting": samples({"p": 20}), "kv": lambda at: samples({"p": 0.9}) if at == AT else []})
    (result,) = (await run(tree, source)).targets[0].checks
    assert (result.verdict, result.reason) == (Verdict.UNKNOWN, Reason.NO_BASELINE)


async def test_children_are_skipped_where_the_parent_did_not_match() -> None:
    child = check("c", "cfg", {"above": 0}, conclusion=conclusion("disabled"))
    tree = make_tree(check("a", "kv", {"above": 0.9}, conclusion=conclusion("kv_full"), children=[child]))
    source = FakeSource(
        {
            "waiting": samples({"hot": 20, "cold": 20}),
            "kv": samples({"hot": 0.95, "cold": 0.2}),
            "cfg": samples({"hot": 1, "cold": 1}),
        }
    )
    by_pod = {t.labels["pod"]: t for t in (await run(tree, source)).targets}
    assert [(c.id, c.verdict) for c in by_pod["cold"].checks] == [("a", Verdict.CLEAR), ("c", Verdict.SKIPPED)]
    hot = by_pod["hot"]
    assert [c.cause for c in hot.root_causes] == ["disabled", "kv_full"]  # deepest first
    assert [e.check for e in hot.root_causes[0].evidence] == ["a", "c"]  # the branch taken


async def test_equal_depth_causes_rank_by_how_far_past_the_threshold() -> None:
    tree = make_tree(
        check("a", "kv", {"above": 0.5}, conclusion=conclusion("slightly")),
        check("b", "running", {"above": 100}, conclusion=conclusion("far")),
    )
    source = FakeSource({"waiting": samples({"p": 20}), "kv": samples({"p": 0.55}), "running": samples({"p": 300})})
    assert [c.cause for c in (await run(tree, source)).targets[0].root_causes] == ["far", "slightly"]


async def test_no_symptom_means_no_cause_even_if_a_check_matches() -> None:
    tree = make_tree(check("a", "kv", {"above": 0.9}, conclusion=conclusion("kv_full")))
    source = FakeSource({"waiting": samples({"p": 2}), "kv": samples({"p": 0.95})})
    target = (await run(tree, source)).targets[0]
    assert target.symptom_present is False
    assert target.checks[0].verdict is Verdict.MATCHED
    assert target.root_causes == ()


async def test_unknown_symptom_lists_possible_causes_never_root_causes() -> None:
    tree = make_tree(check("a", "kv", {"above": 0.9}, conclusion=conclusion("kv_full")))
    source = FakeSource({"waiting": [Sample({"namespace": "prod", "pod": "p"}, math.nan)], "kv": samples({"p": 1})})
    target = (await run(tree, source)).targets[0]
    assert target.symptom_present is None
    assert target.root_causes == ()
    assert [c.cause for c in target.possible_causes] == ["kv_full"]


async def test_absent_as_zero_only_when_the_metric_exists() -> None:
    tree = make_tree(check("a", "oom_kills", {"above": 0}, absent_as_zero=True))
    with_metric = FakeSource({"waiting": samples({"p": 20}), "oom_kills": samples({"elsewhere": 1})})
    (result,) = (await run(tree, with_metric)).targets[0].checks
    assert (result.verdict, result.evidence.value if result.evidence else None) == (Verdict.CLEAR, 0.0)
    without = FakeSource({"waiting": samples({"p": 20})})
    (result,) = (await run(tree, without)).targets[0].checks
    assert result.reason is Reason.METRIC_ABSENT


async def test_value_label_reads_config_from_a_label() -> None:
    node = check("a", "cfg", {"above": 0.94}, value_label="gpu_memory_utilization", conclusion=conclusion("high"))
    tree = make_tree(node)
    info = [
        Sample({"namespace": "prod", "pod": "p", "gpu_memory_utilization": "0.95"}, 1.0),
        Sample({"namespace": "prod", "pod": "q", "gpu_memory_utilization": "None"}, 1.0),
    ]
    source = FakeSource({"waiting": samples({"p": 20, "q": 20}), "cfg": info})
    by_pod = {t.labels["pod"]: t for t in (await run(tree, source)).targets}
    assert by_pod["p"].root_causes[0].cause == "high"
    assert by_pod["q"].checks[0].reason is Reason.BAD_VALUE


async def test_low_traffic_makes_ratio_checks_unknown() -> None:
    traffic = {"query": "sum by ($target) (rps)", "min": 0.5}
    tree = make_tree(check("a", "kv", {"above": 0.9}, needs_traffic=True), traffic=traffic)
    source = FakeSource({"waiting": samples({"p": 20}), "kv": samples({"p": 0.95}), "rps": samples({"p": 0.01})})
    (result,) = (await run(tree, source)).targets[0].checks
    assert (result.verdict, result.reason) == (Verdict.UNKNOWN, Reason.LOW_TRAFFIC)
    assert result.detail == "traffic 0.01 below the floor 0.5"


async def test_assumed_params_are_carried_in_the_evidence_and_overrides_apply() -> None:
    tree = make_tree(check("a", "running", {"above": "$seqs"}, conclusion=conclusion("full")))
    source = FakeSource({"waiting": samples({"p": 20}), "running": samples({"p": 100})})
    assert (await run(tree, source)).targets[0].root_causes == ()
    diagnosis = await run(tree, source, overrides={"seqs": 64})
    assert diagnosis.targets[0].root_causes[0].evidence[-1].assumed == {"seqs": 64.0}
    with pytest.raises(ParamError, match="no such param"):
        await run(tree, source, overrides={"nope": 1})
    # A limit left unset (.inf: decided from the data elsewhere) was not assumed: not listed.
    unset = await run(tree, source, overrides={"seqs": math.inf})
    (seqs,) = unset.targets[0].checks
    assert seqs.evidence is not None
    assert seqs.evidence.assumed == {}


async def test_scope_reaches_every_selector_as_a_matcher() -> None:
    tree = make_tree(check("a", "kv", {"above": 0.9}))
    source = FakeSource({"waiting": samples({"p": 20}), "kv": samples({"p": 1})})
    await run(tree, source, scope=Scope.of({"pod": "p", "model_name": "m"}))
    assert all('pod=~"p|"' in q and 'model_name=~"m|"' in q for q, _ in source.queries)


async def test_series_without_a_scope_label_still_join_but_targets_follow_the_scope() -> None:
    tree = make_tree(check("a", "node_nic", {"above": 0.8}, conclusion=conclusion("nic")))
    nic = [Sample({"pod": "p", "namespace": "prod"}, 0.9), Sample({"pod": "q", "namespace": "prod"}, 0.9)]
    source = FakeSource({"waiting": samples({"p": 20, "q": 20}), "node_nic": nic})
    diagnosis = await run(tree, source, scope=Scope.of({"pod": "p"}))
    assert [dict(t.labels) for t in diagnosis.targets] == [{"namespace": "prod", "pod": "p"}]


async def test_depth_in_the_seed_drawing_ranks_first() -> None:
    grouped = {
        "id": "g",
        "title": TEXT,
        "group": True,
        "children": [check("in_group", "kv", {"above": 0.5}, conclusion=conclusion("slightly"))],
    }
    tree = make_tree(grouped, check("b", "running", {"above": 100}, conclusion=conclusion("far")))
    source = FakeSource({"waiting": samples({"p": 20}), "kv": samples({"p": 0.55}), "running": samples({"p": 300})})
    target = (await run(tree, source)).targets[0]
    # The seed nests "locate the scenario" steps under headings: deeper in the drawing, more specific.
    assert [c.cause for c in target.root_causes] == ["slightly", "far"]
    assert [c.verdict for c in target.checks] == [Verdict.MATCHED, Verdict.MATCHED, Verdict.MATCHED]
