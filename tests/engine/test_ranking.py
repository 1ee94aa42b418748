"""Causal ranking, unknown symptoms, ±Inf and partial answers, through the Evaluator with a fake source."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from diagnosd.engine import Evaluator
from diagnosd.findings import Reason, Verdict
from diagnosd.findings.lifecycle import Observed
from diagnosd.findings.observe import observe, observe_target
from diagnosd.sources.base import Sample, Samples
from diagnosd.trees.model import Tree
from tests.engine.fakes import FakeSource, samples

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
BASE = AT - timedelta(days=1)
TEXT = {"zh": "中", "en": "en"}


def conclusion(cause: str, **extra: Any) -> dict[str, Any]:
    return {"cause": cause, "title": TEXT, "remediation": [TEXT], **extra}


def check(id_: str, metric: str, compare: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": id_, "title": TEXT, "query": f"max by ($target) ({metric})", "compare": compare, **extra}


def tree(*nodes: dict[str, Any], detect: str = "max by ($target) (ttft)") -> Tree:
    return Tree.model_validate(
        {
            "id": "ttft_high",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "params": {"slack": {"default": 1.5, "doc": "d"}},
            "detect": {"title": TEXT, "query": detect, "compare": {"above": 1}},
            "nodes": list(nodes),
        }
    )


def by_time(now: float, then: float) -> Any:
    return lambda at: samples({"p": now if at == AT else then})


async def diagnose(t: Tree, source: FakeSource) -> Any:
    return await Evaluator(source).diagnose(t, None, AT)


def ratio(id_: str, metric: str, **extra: Any) -> dict[str, Any]:
    return check(id_, metric, {"ratio_above": 1.3, "baseline": "1d"}, **extra)


PROMPTS = ratio(
    "prompt_inflation",
    "prompts",
    conclusion=conclusion("prompt_inflation", explains=[{"cause": "contention", "slack": "$slack"}, "batch_too_large"]),
)
CONTENTION = ratio("contention", "prefill", conclusion=conclusion("contention"))
BATCH = ratio("batch_too_large", "steps", conclusion=conclusion("batch_too_large"))


async def test_an_explained_cause_is_a_consequence_under_its_cause() -> None:
    source = FakeSource(
        {
            "ttft": samples({"p": 5}),
            "prompts": by_time(3000, 1000),  # x3
            "prefill": by_time(4000, 1000),  # x4: within x3 times slack 1.5
            "steps": by_time(2000, 100),  # x20: no slack asked
        }
    )
    target = (await diagnose(tree(CONTENTION, BATCH, PROMPTS), source)).targets[0]
    assert [c.cause for c in target.root_causes] == ["prompt_inflation"]
    [root] = target.root_causes
    # Consequences rank like causes: the larger change first.
    assert [c.cause for c in root.explains] == ["batch_too_large", "contention"]
    assert {c.cause: c.explained_by for c in target.consequences} == {
        "contention": ("prompt_inflation",),
        "batch_too_large": ("prompt_inflation",),
    }
    assert all(c.evidence for c in root.explains)


async def test_slack_caps_what_a_change_can_explain() -> None:
    source = FakeSource(
        {
            "ttft": samples({"p": 5}),
            "prompts": by_time(3000, 1000),  # x3
            "prefill": by_time(10000, 1000),  # x10 > x3 * 1.5: more than the prompts account for
            "steps": by_time(200, 100),
        }
    )
    target = (await diagnose(tree(CONTENTION, BATCH, PROMPTS), source)).targets[0]
    assert {c.cause for c in target.root_causes} == {"prompt_inflation", "contention"}
    assert [c.cause for c in target.consequences] == ["batch_too_large"]


TRAFFIC = ratio(
    "traffic",
    "requests",
    conclusion=conclusion(
        "traffic", explains=[{"cause": "contention", "slack": "$slack"}, {"cause": "hit_drop", "slack": "$slack"}]
    ),
)
HIT_DROP = check(
    "hit_drop",
    "hits",
    {"ratio_below": 0.7, "baseline": "1d"},
    unit="ratio",
    conclusion=conclusion("hit_drop", explains=[{"cause": "contention", "slack": "$slack"}]),
)


async def test_a_change_that_is_the_product_of_a_chain_is_sized_by_both() -> None:
    # Prefill is requests x misses: traffic x2 that also halved a 90 % hit ratio (misses 0.1 ->
    # 0.55, x5.5) accounts for prefill x11, which neither x2 nor x5.5 covers alone (times 1.5).
    source = FakeSource(
        {
            "ttft": samples({"p": 5}),
            "requests": by_time(2.0, 1.0),
            "hits": by_time(0.45, 0.9),
            "prefill": by_time(11.0, 1.0),
        }
    )
    target = (await diagnose(tree(CONTENTION, HIT_DROP, TRAFFIC), source)).targets[0]
    assert [c.cause for c in target.root_causes] == ["traffic"]
    assert {c.cause: set(c.explained_by) for c in target.consequences} == {
        "hit_drop": {"traffic"},
        "contention": {"traffic", "hit_drop"},
    }


async def test_a_chain_sizes_nothing_beyond_the_product_nor_without_its_link() -> None:
    # Prefill x20 is beyond x2 * x5.5 * 1.5: contention stays a root cause.
    values = {"ttft": samples({"p": 5}), "requests": by_time(2.0, 1.0), "hits": by_time(0.45, 0.9)}
    beyond = FakeSource({**values, "prefill": by_time(20.0, 1.0)})
    target = (await diagnose(tree(CONTENTION, HIT_DROP, TRAFFIC), beyond)).targets[0]
    assert {c.cause for c in target.root_causes} == {"traffic", "contention"}
    # Hits 0.9 -> 0.09 (÷10) is far beyond what traffic x2 explains: the hit drop is a root cause
    # of its own, so the traffic does not size the prefill through it.
    unlinked = FakeSource({**values, "hits": by_time(0.09, 0.9), "prefill": by_time(11.0, 1.0)})
    target = (await diagnose(tree(CONTENTION, HIT_DROP, TRAFFIC), unlinked)).targets[0]
    assert {c.cause for c in target.root_causes} == {"traffic", "hit_drop"}
    assert {c.cause: c.explained_by for c in target.consequences} == {"contention": ("hit_drop",)}


async def test_a_chain_through_a_partial_match_does_not_size_a_fully_seen_cause() -> None:
    # The hit ratio is read with a store missing: the traffic may explain that partial drop, but
    # the drop's misses cannot size the fully seen prefill x11 through it (traffic x2 alone covers
    # x3): the contention stays a root cause.
    warning = "store gateway 10.0.0.7:10901 did not respond"

    def partial_hits(at: datetime) -> Samples:
        return Samples([Sample({"namespace": "prod", "pod": "p"}, 0.45 if at == AT else 0.9)], [warning])

    source = FakeSource(
        {
            "ttft": samples({"p": 5}),
            "requests": by_time(2.0, 1.0),
            "hits": partial_hits,
            "prefill": by_time(11.0, 1.0),
        }
    )
    target = (await diagnose(tree(CONTENTION, HIT_DROP, TRAFFIC), source)).targets[0]
    assert {c.cause for c in target.root_causes} == {"traffic", "contention"}
    assert {c.cause: c.explained_by for c in target.consequences} == {"hit_drop": ("traffic",)}


async def test_severity_then_specificity_then_strength_rank_root_causes() -> None:
    nodes = (
        check("shallow", "alpha_m", {"above": 1}, conclusion=conclusion("shallow")),
        check(
            "parent",
            "bravo_m",
            {"above": 1},
            conclusion=conclusion("parent"),
            children=[check("deep", "charlie_m", {"above": 1}, conclusion=conclusion("deep"))],
        ),
        check("big", "delta_m", {"above": 1}, conclusion=conclusion("big")),
        check("critical", "echo_m", {"above": 1}, conclusion=conclusion("critical", severity="critical")),
        check("info", "foxtrot_m", {"above": 1}, conclusion=conclusion("info", severity="info")),
    )
    values = {"ttft": 5, "alpha_m": 2, "bravo_m": 2, "charlie_m": 1.5, "delta_m": 50, "echo_m": 1.1, "foxtrot_m": 100}
    source = FakeSource({k: samples({"p": v}) for k, v in values.items()})
    target = (await diagnose(tree(*nodes), source)).targets[0]
    assert [c.cause for c in target.root_causes] == ["critical", "deep", "big", "shallow", "parent", "info"]


async def test_a_chain_of_explanations_nests() -> None:
    nodes = (
        check("a", "alpha_m", {"above": 1}, conclusion=conclusion("a", explains=["b"])),
        check("b", "bravo_m", {"above": 1}, conclusion=conclusion("b", explains=["c"])),
        check("c", "charlie_m", {"above": 1}, conclusion=conclusion("c")),
    )
    source = FakeSource({k: samples({"p": 2}) for k in ("ttft", "alpha_m", "bravo_m", "charlie_m")})
    target = (await diagnose(tree(*nodes), source)).targets[0]
    [root] = target.root_causes
    assert root.cause == "a"
    assert [x.cause for x in root.explains] == ["b"]
    assert [x.cause for x in root.explains[0].explains] == ["c"]
    assert [(c.cause, c.explained_by) for c in target.consequences] == [("b", ("a",)), ("c", ("b",))]


async def test_an_unmatched_explainer_explains_nothing() -> None:
    nodes = (
        check("a", "alpha_m", {"above": 1}, conclusion=conclusion("a", explains=["b"])),
        check("b", "bravo_m", {"above": 1}, conclusion=conclusion("b")),
    )
    source = FakeSource({"ttft": samples({"p": 5}), "alpha_m": samples({"p": 0.5}), "bravo_m": samples({"p": 2})})
    target = (await diagnose(tree(*nodes), source)).targets[0]
    assert [c.cause for c in target.root_causes] == ["b"]
    assert target.consequences == ()


async def test_unknown_symptom_gives_possible_causes_and_raises_no_finding() -> None:
    nodes = (
        check("a", "alpha_m", {"above": 1}, conclusion=conclusion("a", explains=["b"])),
        check("b", "bravo_m", {"above": 1}, conclusion=conclusion("b")),
    )
    source = FakeSource({"ttft": samples({"p": math.nan}), "alpha_m": samples({"p": 2}), "bravo_m": samples({"p": 2})})
    diagnosis = await diagnose(tree(*nodes), source)
    target = diagnosis.targets[0]
    assert target.symptom_present is None
    assert target.root_causes == ()
    assert [c.cause for c in target.possible_causes] == ["a"]
    assert [c.cause for c in target.consequences] == ["b"]
    assert all(o.seen is not Observed.HOLDS for o in observe(diagnosis))


async def test_clear_symptom_lists_nothing() -> None:
    source = FakeSource({"ttft": samples({"p": 0.5}), "alpha_m": samples({"p": 2})})
    target = (await diagnose(tree(check("a", "alpha_m", {"above": 1}, conclusion=conclusion("a"))), source)).targets[0]
    assert (target.root_causes, target.possible_causes, target.consequences) == ((), (), ())


async def test_infinities_are_unknown_not_measurements() -> None:
    nodes = (check("a", "alpha_m", {"above": 1}, conclusion=conclusion("a")), check("b", "bravo_m", {"below": 1}))
    source = FakeSource(
        {"ttft": samples({"p": 5}), "alpha_m": samples({"p": math.inf}), "bravo_m": samples({"p": -math.inf})}
    )
    target = (await diagnose(tree(*nodes), source)).targets[0]
    verdicts = {c.id: (c.verdict, c.reason, c.detail) for c in target.checks}
    assert verdicts["a"][:2] == (Verdict.UNKNOWN, Reason.INFINITE)
    assert "+Inf (division by zero)" in str(verdicts["a"][2])
    assert verdicts["b"][:2] == (Verdict.UNKNOWN, Reason.INFINITE)
    assert "-Inf" in str(verdicts["b"][2])
    assert target.root_causes == ()


async def test_a_minus_inf_detect_is_unknown_not_clear() -> None:
    source = FakeSource({"ttft": samples({"p": -math.inf}), "alpha_m": samples({"p": 2})})
    target = (await diagnose(tree(check("a", "alpha_m", {"above": 1}, conclusion=conclusion("a"))), source)).targets[0]
    assert target.symptom_present is None
    assert target.detect.reason is Reason.INFINITE
    assert [c.cause for c in target.possible_causes] == ["a"]


async def test_a_quantile_beyond_the_top_bucket_is_a_large_value() -> None:
    quantile = "histogram_quantile(0.99, sum by ($target, le) (rate(prompt_bucket[5m])))"
    node = {
        "id": "long",
        "title": TEXT,
        "query": quantile,
        "compare": {"above": 32000},
        "conclusion": conclusion("long"),
    }
    ratio_node = {
        "id": "grew",
        "title": TEXT,
        "query": quantile.replace("0.99", "0.5"),
        "compare": {"ratio_above": 2, "baseline": "1d"},
    }
    inf_now = FakeSource({"ttft": samples({"p": 5}), "prompt_bucket": samples({"p": math.inf})})
    target = (await diagnose(tree(node), inf_now)).targets[0]
    assert [c.cause for c in target.root_causes] == ["long"]
    inf_then = FakeSource({"ttft": samples({"p": 5}), "prompt_bucket": by_time(1000, math.inf)})
    grew = next(c for c in (await diagnose(tree(ratio_node), inf_then)).targets[0].checks if c.id == "grew")
    assert (grew.verdict, grew.reason) == (Verdict.UNKNOWN, Reason.INFINITE)
    assert "top bucket" in str(grew.detail)


async def test_a_partial_answer_never_clears_and_keeps_a_match() -> None:
    warning = "store gateway 10.0.0.7:10901 did not respond"
    nodes = (
        check("a", "alpha_m", {"above": 1}, conclusion=conclusion("a")),
        check("b", "bravo_m", {"above": 1}, conclusion=conclusion("b")),
    )
    source = FakeSource(
        {
            "ttft": samples({"p": 5}),
            "alpha_m": Samples([Sample({"namespace": "prod", "pod": "p"}, 2.0)], [warning]),
            "bravo_m": Samples([Sample({"namespace": "prod", "pod": "p"}, 0.5)], [warning]),
        }
    )
    diagnosis = await diagnose(tree(*nodes), source)
    target = diagnosis.targets[0]
    checks = {c.id: c for c in target.checks}
    assert checks["a"].verdict is Verdict.MATCHED
    assert checks["a"].warnings == (warning,)
    assert warning in str(checks["a"].detail)
    assert (checks["b"].verdict, checks["b"].reason) == (Verdict.UNKNOWN, Reason.PARTIAL)
    assert [c.cause for c in target.root_causes] == ["a"]
    assert target.root_causes[0].evidence[-1].warnings == (warning,)
    assert any(warning in note and "partial" in note for note in diagnosis.notes)


async def test_a_partial_detect_is_unknown_when_it_would_be_clear() -> None:
    source = FakeSource(
        {
            "ttft": Samples([Sample({"namespace": "prod", "pod": "p"}, 0.5)], ["partial response"]),
            "alpha_m": samples({"p": 2}),
        }
    )
    target = (await diagnose(tree(check("a", "alpha_m", {"above": 1}, conclusion=conclusion("a"))), source)).targets[0]
    assert target.symptom_present is None
    assert target.detect.reason is Reason.PARTIAL
    assert target.root_causes == ()
    assert [c.cause for c in target.possible_causes] == ["a"]


# --------------------------------------------------------------- causes an unchecked cause would explain


async def test_a_cause_that_an_unchecked_cause_would_explain_is_possible_not_a_root_cause() -> None:
    # The prompts could not be read (their exporter is missing): the steps x20 may be theirs, by
    # the size the prompts' change would have to have (a sized explanation).
    prompts = ratio(
        "prompt_inflation",
        "prompts",
        conclusion=conclusion("prompt_inflation", explains=[{"cause": "batch_too_large", "slack": "$slack"}]),
    )
    source = FakeSource({"ttft": samples({"p": 5}), "steps": by_time(2000, 100)}, present={"ttft", "steps"})
    target = (await diagnose(tree(BATCH, prompts), source)).targets[0]
    checks = {c.id: c.verdict for c in target.checks}
    assert checks == {"batch_too_large": Verdict.MATCHED, "prompt_inflation": Verdict.UNKNOWN}
    assert target.symptom_present is True
    assert target.root_causes == ()
    [possible] = target.possible_causes
    assert (possible.cause, possible.unsettled_by) == ("batch_too_large", ("prompt_inflation",))
    # Nothing is raised for it, and nothing reads clear: both are unknown to the findings.
    seen = {o.cause: o.seen for o in observe_target("ttft_high", target)}
    assert seen == {"batch_too_large": Observed.UNKNOWN, "prompt_inflation": Observed.UNKNOWN}


async def test_an_unchecked_check_below_an_unknown_gate_still_leaves_the_cause_possible() -> None:
    gated = check(
        "gpu_busy",
        "util",
        {"above": 90},
        children=[
            ratio(
                "contention",
                "prefill",
                conclusion=conclusion("contention", explains=[{"cause": "batch_too_large", "slack": "$slack"}]),
            )
        ],
    )
    source = FakeSource(
        {"ttft": samples({"p": 5}), "steps": by_time(2000, 100), "prefill": by_time(4000, 1000)},
        present={"ttft", "steps", "prefill"},
    )
    target = (await diagnose(tree(gated, BATCH), source)).targets[0]
    assert {c.id: c.verdict for c in target.checks}["contention"] is Verdict.SKIPPED
    assert [(c.cause, c.unsettled_by) for c in target.possible_causes] == [("batch_too_large", ("contention",))]
    assert target.root_causes == ()


async def test_a_refinement_that_could_not_be_checked_leaves_the_cause_above_it_a_root_cause() -> None:
    # "Why did hits drop?" unknown says nothing against the drop itself: it would only refine it.
    drop = check(
        "hit_drop",
        "hits",
        {"ratio_below": 0.7, "baseline": "1d"},
        conclusion=conclusion("hit_drop"),
        children=[check("dynamic", "radix", {"above": 0.5}, conclusion=conclusion("dynamic", explains=["hit_drop"]))],
    )
    source = FakeSource({"ttft": samples({"p": 5}), "hits": by_time(0.1, 0.6)}, present={"ttft", "hits"})
    target = (await diagnose(tree(drop), source)).targets[0]
    assert {c.id: c.verdict for c in target.checks}["dynamic"] is Verdict.UNKNOWN
    assert [c.cause for c in target.root_causes] == ["hit_drop"]
    assert target.possible_causes == ()


async def test_a_less_severe_unchecked_cause_never_holds_back_a_critical_one() -> None:
    critical = ratio("batch_too_large", "steps", conclusion=conclusion("batch_too_large", severity="critical"))
    source = FakeSource({"ttft": samples({"p": 5}), "steps": by_time(2000, 100)}, present={"ttft", "steps"})
    target = (await diagnose(tree(critical, PROMPTS), source)).targets[0]
    assert [c.cause for c in target.root_causes] == ["batch_too_large"]
    assert target.possible_causes == ()


async def test_a_matched_explaining_cause_makes_a_consequence_whatever_else_is_unchecked() -> None:
    # The contention is matched and explains the steps; the unknown prompts would explain the steps
    # too, which changes nothing: the steps are a consequence either way.
    contention = ratio("contention", "prefill", conclusion=conclusion("contention", explains=["batch_too_large"]))
    prompts = ratio(
        "prompt_inflation", "prompts", conclusion=conclusion("prompt_inflation", explains=["batch_too_large"])
    )
    source = FakeSource(
        {"ttft": samples({"p": 5}), "steps": by_time(2000, 100), "prefill": by_time(4000, 1000)},
        present={"ttft", "steps", "prefill"},
    )
    target = (await diagnose(tree(contention, BATCH, prompts), source)).targets[0]
    assert [c.cause for c in target.root_causes] == ["contention"]
    assert [c.cause for c in target.consequences] == ["batch_too_large"]
    assert target.possible_causes == ()


# queue_backlog's pair: long requests (against yesterday) explain a full KV pool (read now), unsized.
LONG_REQUESTS = check(
    "long_requests_hogging",
    "prompt_tail",
    {"delta_above": 15000, "baseline": "1d"},
    conclusion=conclusion("long_requests_hogging", explains=["kv_pool_full"]),
)
KV_FULL = check("kv_pool_full", "kv_usage", {"above": 0.9}, conclusion=conclusion("kv_pool_full"))


# ----------------------------------------------------- review: what an unchecked cause may hold back


async def test_an_unchecked_explainer_holds_back_only_what_it_would_explain_if_matched() -> None:
    # A sized explanation needs the explained change's size: a cause read from a plain threshold
    # (slots near a configured limit) has none, so even a matched explainer leaves it a root cause.
    # Unchecked, the same explainer cannot do more than it would matched.
    context = ratio(
        "kv_read_growth",
        "context",
        conclusion=conclusion("kv_read_growth", explains=[{"cause": "slots_full", "slack": "$slack"}]),
    )
    slots = check("slots_full", "running", {"above": 0.9}, conclusion=conclusion("slots_full"))
    matched = FakeSource({"ttft": samples({"p": 5}), "running": samples({"p": 0.95}), "context": by_time(3000, 1000)})
    target = (await diagnose(tree(context, slots), matched)).targets[0]
    assert {c.cause for c in target.root_causes} == {"kv_read_growth", "slots_full"}
    unchecked = FakeSource({"ttft": samples({"p": 5}), "running": samples({"p": 0.95})}, present={"ttft", "running"})
    target = (await diagnose(tree(context, slots), unchecked)).targets[0]
    assert {c.id: c.verdict for c in target.checks}["kv_read_growth"] is Verdict.UNKNOWN
    assert [c.cause for c in target.root_causes] == ["slots_full"]
    assert target.possible_causes == ()


async def test_a_young_target_keeps_a_cause_it_measures_now_when_only_the_explainer_lacks_history() -> None:
    # queue_backlog on a pod started 40 minutes ago: the queue and the full KV pool are read now
    # (no baseline), the long-request check compares with yesterday and has nothing to compare.
    # "No history" is not a doubt about the pool: it stays the root cause, and a finding is raised.
    source = FakeSource(
        {
            "ttft": samples({"p": 5}),
            "kv_usage": samples({"p": 0.97}),
            "prompt_tail": lambda at: samples({"p": 500}) if at == AT else [],
        }
    )
    target = (await diagnose(tree(KV_FULL, LONG_REQUESTS), source)).targets[0]
    checks = {c.id: c for c in target.checks}
    assert (checks["long_requests_hogging"].verdict, checks["long_requests_hogging"].reason) == (
        Verdict.UNKNOWN,
        Reason.NO_BASELINE,
    )
    assert [c.cause for c in target.root_causes] == ["kv_pool_full"]
    seen = {o.cause: o.seen for o in observe_target("ttft_high", target)}
    assert seen["kv_pool_full"] is Observed.HOLDS


async def test_an_unsized_explainer_whose_metrics_are_not_exported_holds_nothing_back() -> None:
    # SGLang without --collect-tokens-histogram: the long-request check has no metric at all. A full
    # KV pool with a queue is still the root cause (a finding), not a possible one.
    source = FakeSource({"ttft": samples({"p": 5}), "kv_usage": samples({"p": 0.97})}, present={"ttft", "kv_usage"})
    target = (await diagnose(tree(KV_FULL, LONG_REQUESTS), source)).targets[0]
    checks = {c.id: c for c in target.checks}
    assert (checks["long_requests_hogging"].verdict, checks["long_requests_hogging"].reason) == (
        Verdict.UNKNOWN,
        Reason.METRIC_ABSENT,
    )
    assert [c.cause for c in target.root_causes] == ["kv_pool_full"]
    assert target.possible_causes == ()
