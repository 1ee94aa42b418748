"""A narrowed diagnosis on a fake source: the tree is walked only over the targets where the symptom
holds or is unknown, each of them as the whole walk diagnoses it; a clear target keeps its detect;
the whole scope is read where narrowing would change an answer (no target to narrow to, a
fleet-level check)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from diagnosd.engine import Looking, Scope
from diagnosd.engine.narrowed import diagnose_narrowed, merged
from diagnosd.findings.model import Diagnosis, TargetDiagnosis
from diagnosd.sources.base import Sample
from diagnosd.trees.model import Tree
from tests.engine.fakes import Answer, FakeSource, samples

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
TEXT = {"zh": "中", "en": "en"}
PODS = 100


def tree() -> Tree:
    """TTFT twice its value a day ago; then a full KV pool, and under it a long queue."""
    return Tree.model_validate(
        {
            "id": "ttft",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": {
                "title": TEXT,
                "query": "max by ($target) (ttft_gauge)",
                "compare": {"ratio_above": 2, "baseline": "1d"},
            },
            "nodes": [
                {
                    "id": "kv",
                    "title": TEXT,
                    "query": "max by ($target) (kv_gauge)",
                    "compare": {"above": 0.9},
                    "conclusion": {"cause": "kv_full", "title": TEXT, "remediation": [TEXT]},
                    "children": [
                        {
                            "id": "queue",
                            "title": TEXT,
                            "query": "max by ($target) (queue_gauge)",
                            "compare": {"above": 10},
                            "conclusion": {"cause": "queueing", "title": TEXT, "remediation": [TEXT]},
                        }
                    ],
                },
                {"id": "look", "title": TEXT, "manual": TEXT},
            ],
        }
    )


def pods(value: float, **special: float) -> dict[str, float]:
    return {f"vllm-{i}": value for i in range(PODS)} | special


def fleet(**answers: Any) -> FakeSource:
    """vllm-3 and vllm-7 slow (vllm-7 with a full KV pool and a queue), vllm-5 without a value a
    day ago (its symptom unknown), every other pod as it was."""

    def ttft(at: datetime) -> Answer:
        if at == AT:
            return samples(pods(1.0, **{"vllm-3": 3.0, "vllm-7": 5.0}))
        return samples({k: v for k, v in pods(1.0).items() if k != "vllm-5"})

    base: dict[str, Any] = {
        "ttft_gauge": ttft,
        "kv_gauge": samples(pods(0.5, **{"vllm-7": 0.97, "vllm-5": 0.95})),
        "queue_gauge": samples(pods(0.0, **{"vllm-7": 30.0})),
    }
    return FakeSource(answers=base | answers)


def key(t: TargetDiagnosis) -> tuple[str, str]:
    return t.labels["namespace"], t.labels["pod"]


def seen(t: TargetDiagnosis) -> tuple[Any, ...]:
    """Everything a target's diagnosis says but the query texts (the narrowed walk's carry its scope)."""
    return (
        t.symptom_present,
        t.detect.verdict,
        t.detect.evidence.value if t.detect.evidence else None,
        [c.cause for c in t.root_causes],
        [c.cause for c in t.consequences],
        [c.cause for c in t.possible_causes],
        [(c.id, c.verdict, c.reason, c.evidence.value if c.evidence else None) for c in t.checks],
    )


async def both(source: FakeSource) -> tuple[Diagnosis, Diagnosis]:
    evaluator = Looking(clock=lambda: AT).evaluator(source)
    whole = await evaluator.diagnose(tree(), Scope(), AT)
    source.queries.clear()
    return whole, await diagnose_narrowed(evaluator, tree(), Scope(), AT)


def pods_asked(source: FakeSource, metric: str) -> list[str]:
    """The pod matcher of every query of `metric` ("" where it had none)."""
    out = []
    for query, _ in source.queries:
        if metric in query:
            found = re.search(r'pod=~"([^"]*)"', query)
            out.append(found.group(1) if found else "")
    return out


async def test_only_targets_not_clear_are_walked_each_as_the_whole_walk_walks_it() -> None:
    source = fleet()
    whole, narrowed = await both(source)
    assert [key(t) for t in narrowed.targets] == [key(t) for t in whole.targets]
    assert len(narrowed.targets) == PODS
    walked = {k: t for k, t in ((key(t), t) for t in whole.targets) if t.symptom_present is not False}
    assert sorted(p for _, p in walked) == ["vllm-3", "vllm-5", "vllm-7"]
    for mine, theirs in zip(narrowed.targets, whole.targets, strict=True):
        if key(mine) in walked:
            assert seen(mine) == seen(theirs), key(mine)
        else:
            assert mine.symptom_present is False
            assert mine.checks == ()
            assert mine.detect == theirs.detect  # the same query at the same scope: the same evidence
    by_pod = {t.labels["pod"]: t for t in narrowed.targets}
    assert sorted(c.cause for c in by_pod["vllm-7"].root_causes) == ["kv_full", "queueing"]
    assert [c.cause for c in by_pod["vllm-5"].possible_causes] == ["kv_full"]
    # The branches were read for the three walked pods alone; the detect for all of them first.
    for metric in ("kv_gauge", "queue_gauge"):
        (matcher,) = pods_asked(source, metric)
        assert set(matcher.split("|")) - {""} == {"vllm-3", "vllm-5", "vllm-7"}, metric
    assert "" in pods_asked(source, "ttft_gauge")
    assert narrowed.scope == whole.scope == {}
    assert narrowed.queries == len(source.queries)


async def test_a_clear_fleet_is_read_by_its_detect_alone() -> None:
    def calm(at: datetime) -> Answer:
        return samples(pods(1.0))

    source = fleet(ttft_gauge=calm)
    whole, narrowed = await both(source)
    assert {m for q, _ in source.queries for m in re.findall(r"\w+_gauge", q)} == {"ttft_gauge"}
    assert all(t.symptom_present is False and t.checks == () for t in narrowed.targets)
    assert [t.detect for t in narrowed.targets] == [t.detect for t in whole.targets]
    assert all(t.checks for t in whole.targets)  # what was left out: the whole walk's checks


async def test_no_target_to_narrow_to_reads_the_whole_scope() -> None:
    """The detect sees no pod: the checks' answers name the targets (each symptom unknown, with
    its possible causes), as in the whole walk, which is what runs."""
    source = fleet(ttft_gauge=[])
    whole, narrowed = await both(source)
    assert len(whole.targets) == PODS
    assert [seen(t) for t in narrowed.targets] == [seen(t) for t in whole.targets]
    assert all(t.symptom_present is None for t in narrowed.targets)
    assert pods_asked(source, "kv_gauge") == [""]
    assert narrowed.notes == whole.notes


async def test_a_fleet_level_check_in_the_walk_is_read_over_the_whole_scope() -> None:
    """A queue answered without target labels (a sum over every pod): narrowed, it would sum the
    walked pods alone; the walk is made again over the whole scope, and its fleet result stands."""
    everywhere = [Sample({}, 4.0 * PODS)]

    def sums(at: datetime) -> Answer:
        return everywhere

    source = fleet(queue_gauge=sums)
    whole, narrowed = await both(source)
    assert whole.fleet
    assert narrowed.fleet == whole.fleet
    assert narrowed.fleet[0].check.evidence is not None
    assert narrowed.fleet[0].check.evidence.value == 400.0
    assert pods_asked(source, "queue_gauge")[-1] == ""  # the last reading: the whole scope's
    for mine, theirs in zip(narrowed.targets, whole.targets, strict=True):
        if theirs.symptom_present is not False:
            assert seen(mine) == seen(theirs)


async def test_a_strict_label_is_never_narrowed() -> None:
    source = fleet()
    evaluator = Looking(strict_labels=frozenset({"namespace"}), clock=lambda: AT).evaluator(source)
    await diagnose_narrowed(evaluator, tree(), Scope.of({"namespace": "prod"}), AT)
    kv = [q for q, _ in source.queries if "kv_gauge" in q]
    assert kv
    assert all('namespace="prod"' in q and "namespace=~" not in q for q in kv)


async def test_the_detect_pass_decides_which_targets_are_there() -> None:
    """Where an answer changed between the passes (a sample scraped late), the walk's reading of
    a target it walked stands; a target the detect pass saw clear stays clear; a target the walk
    missed keeps the detect pass' reading; a target only the walk saw is not added."""
    whole = await Looking(clock=lambda: AT).evaluator(fleet()).diagnose(tree(), Scope(), AT)
    sample = whole.targets[0]

    def target(pod: str, present: bool | None, checks: int) -> TargetDiagnosis:
        return replace(
            sample, labels={"namespace": "prod", "pod": pod}, symptom_present=present, checks=sample.checks[:checks]
        )

    detected = replace(
        whole, targets=(target("a", True, 0), target("b", False, 0), target("c", None, 0)), queries=2, notes=("a",)
    )
    walked = replace(
        whole,
        scope={"pod": "a"},
        targets=(target("a", False, 2), target("b", True, 2), target("d", True, 2)),
        queries=3,
        notes=("a", "b"),
    )
    out = merged(detected, walked)
    assert [(t.labels["pod"], t.symptom_present, len(t.checks)) for t in out.targets] == [
        ("a", False, 2),
        ("b", False, 0),
        ("c", None, 0),
    ]
    assert (out.scope, out.queries, out.notes) == ({}, 5, ("a", "b"))
