"""Triage on a fake source: worst first, the clear line, why a symptom could not be looked at, no
baseline never clear, and a query count that does not grow with the number of targets."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from diagnosd.engine import Looking, Scope
from diagnosd.engine.triage import triage
from diagnosd.errors import QueryRejected, SourceUnavailable
from diagnosd.findings import triage as T
from diagnosd.trees.model import Tree
from tests.engine.fakes import Answer, FakeSource, samples

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
TEXT = {"zh": "中", "en": "en"}


def tree(id_: str, metric: str, compare: dict[str, Any], *nodes: dict[str, Any]) -> Tree:
    fn = "min" if any(op.endswith("below") for op in compare) else "max"
    return Tree.model_validate(
        {
            "id": id_,
            "title": {"zh": f"{id_} 中", "en": f"{id_} title"},
            "target": ["namespace", "pod"],
            "detect": {"title": TEXT, "query": f"{fn} by ($target) ({metric})", "compare": compare},
            "nodes": list(nodes) or [{"id": f"{id_}_manual", "title": TEXT, "manual": TEXT}],
        }
    )


def check(id_: str, metric: str, compare: dict[str, Any], cause: str, severity: str = "warning") -> dict[str, Any]:
    return {
        "id": id_,
        "title": TEXT,
        "query": f"max by ($target) ({metric})",
        "compare": compare,
        "conclusion": {"cause": cause, "title": TEXT, "remediation": [TEXT], "severity": severity},
    }


def trees() -> list[Tree]:
    return [
        tree(
            "hit_low", "hit_ratio_gauge", {"below": 0.3}, check("off", "caching_off_flag", {"above": 0.5}, "cache_off")
        ),
        tree(
            "backlog",
            "waiting_gauge",
            {"above": 10},
            check("kv", "kv_used_gauge", {"above": 0.9}, "kv_full", "critical"),
        ),
        tree("ttft", "ttft_p95_gauge", {"ratio_above": 1.5, "baseline": "1d"}),
        tree("gpu_idle", "DCGM_FI_DEV_GPU_UTIL", {"below": 10}),
        tree("broken", "broken_gauge", {"above": 1}),
        tree("calm", "calm_gauge", {"above": 100}),
        tree("lonely", "lonely_gauge", {"above": 1}),
    ]


def pods(n: int, value: float) -> dict[str, float]:
    return {f"vllm-{i}": value for i in range(n)}


def fleet(n: int) -> FakeSource:
    """n pods: vllm-0 and vllm-1 back up (vllm-1 with a full KV pool); every pod has a low hit ratio,
    vllm-0 with caching off; TTFT has no value a day ago; the GPU exporter is absent."""
    waiting = {**pods(n, 1.0), "vllm-0": 30.0, "vllm-1": 40.0}
    kv = {**pods(n, 0.5), "vllm-1": 0.97}

    def ttft(at: datetime) -> Answer:
        return samples(pods(n, 2.0)) if at == AT else []

    answers: dict[str, Any] = {
        "waiting_gauge": samples(waiting),
        "kv_used_gauge": samples(kv),
        "hit_ratio_gauge": samples(pods(n, 0.1)),
        "caching_off_flag": samples({**pods(n, 0.0), "vllm-0": 1.0}),
        "ttft_p95_gauge": ttft,
        "broken_gauge": SourceUnavailable("connection refused", url="http://prometheus:9090"),
        "calm_gauge": samples(pods(n, 5.0)),
    }
    present = {*answers, "lonely_gauge"}  # lonely: the metric exists, no sample now
    return FakeSource(answers, present=present)


async def board(source: FakeSource, **options: Any) -> T.Board:
    return await triage(source, trees(), scope=options.pop("scope", None), at=AT, **options)


async def test_worst_first_by_severity_then_number_of_targets() -> None:
    result = await board(fleet(10))
    assert [p.symptom for p in result.present] == ["backlog", "hit_low"]
    backlog, hit_low = result.present
    assert backlog.severity == "critical"
    assert [h.labels["pod"] for h in backlog.hits] == ["vllm-1", "vllm-0"]  # the critical cause first
    top = backlog.hits[0]
    assert top.labels == {"namespace": "prod", "pod": "vllm-1"}
    assert top.cause is not None
    assert top.cause.cause == "kv_full"
    assert top.evidence is not None
    assert top.evidence.check == "kv"
    assert top.evidence.value == pytest.approx(0.97)
    no_cause = backlog.hits[1]
    assert no_cause.cause is None
    assert no_cause.evidence is not None
    assert no_cause.evidence.check == "detect"
    assert no_cause.evidence.value == 30
    assert len(hit_low.hits) == 10
    assert hit_low.severity == "warning"
    assert hit_low.hits[0].labels["pod"] == "vllm-0"
    assert result.found
    assert not result.blind
    assert result.targets == 10


async def test_clear_and_every_reason_a_symptom_could_not_be_looked_at() -> None:
    result = await board(fleet(10))
    assert [c.symptom for c in result.clear] == ["calm"]
    reasons = {u.symptom: u.reasons for u in result.unknown}
    assert set(reasons) == {"ttft", "gpu_idle", "broken", "lonely"}
    assert [(r.reason, r.targets) for r in reasons["ttft"]] == [(T.NO_BASELINE, 10)]
    assert "1d ago" in reasons["ttft"][0].detail
    assert reasons["gpu_idle"][0].reason == T.EXPORTER_ABSENT
    assert "dcgm-exporter" in reasons["gpu_idle"][0].detail
    assert reasons["broken"][0].reason == T.UNREACHABLE
    assert reasons["lonely"][0].reason == T.NO_DATA


async def test_no_baseline_is_never_clear_even_when_some_targets_are() -> None:
    source = fleet(4)
    source.answers["ttft_p95_gauge"] = lambda at: (
        samples({"vllm-0": 2.0, "vllm-1": 2.0}) if at == AT else samples({"vllm-0": 2.0})
    )
    result = await board(source)
    ttft = next(u for u in result.unknown if u.symptom == "ttft")
    assert ttft.clear == 1
    assert [(r.reason, r.targets) for r in ttft.reasons] == [(T.NO_BASELINE, 1)]
    assert "ttft" not in [c.symptom for c in result.clear]


async def test_no_value_now_nor_a_day_ago_is_no_baseline_yet() -> None:
    source = fleet(3)
    source.answers["ttft_p95_gauge"] = []
    result = await board(source)
    ttft = next(u for u in result.unknown if u.symptom == "ttft")
    assert [(r.reason, r.targets) for r in ttft.reasons] == [(T.NO_BASELINE, 0)]
    lonely = next(u for u in result.unknown if u.symptom == "lonely")  # no baseline in its detect
    assert lonely.reasons[0].reason == T.NO_DATA


async def test_metric_absent_when_its_exporter_shows_other_series() -> None:
    source = fleet(3)
    source.present = {*(source.present or set()), "DCGM_FI_DEV_FB_USED"}
    extra = tree("gpu_mem", "DCGM_FI_DEV_FB_USED", {"above": 1e12})
    result = await triage(source, [*trees(), extra], at=AT)
    gpu = next(u for u in result.unknown if u.symptom == "gpu_idle")
    assert gpu.reasons[0].reason == T.METRIC_ABSENT


async def test_query_count_is_the_same_for_10_and_1000_targets() -> None:
    small, large = fleet(10), fleet(1000)
    a = await board(small)
    b = await board(large)
    assert len(a.present[1].hits) == 10
    assert len(b.present[1].hits) == 1000
    assert a.queries == b.queries == len(small.queries) == len(large.queries)
    # detect of 7 trees (+ ttft's baseline), then the walks of the 2 present ones (detect again + 1 check)
    assert a.queries == 8 + 2 * 2


async def test_a_failed_check_in_the_walk_is_said_not_hidden() -> None:
    source = fleet(3)
    source.answers["kv_used_gauge"] = QueryRejected("bad_data: parse error", url="http://prometheus:9090")
    result = await board(source)
    backlog = next(p for p in result.present if p.symptom == "backlog")
    assert [h.cause for h in backlog.hits] == [None, None]
    assert [(u.reason, u.targets) for u in backlog.unseen] == [(T.QUERY_ERROR, 2)]
    assert backlog.unseen[0].detail.startswith("some checks could not run: ")


async def test_scope_keeps_only_matching_targets() -> None:
    result = await board(fleet(10), scope=Scope.of({"pod": "vllm-1"}))
    assert [p.symptom for p in result.present] == ["backlog", "hit_low"]
    assert [h.labels["pod"] for p in result.present for h in p.hits] == ["vllm-1", "vllm-1"]
    assert result.targets == 1


async def test_nothing_reachable_raises_instead_of_an_empty_board() -> None:
    down = SourceUnavailable("connection refused", url="http://prometheus:9090")
    source = FakeSource({"gauge": down}, present={"gauge"})

    async def refuse(*_: object) -> set[str]:
        raise down

    source.metric_names = refuse  # type: ignore[method-assign,assignment]
    with pytest.raises(SourceUnavailable):
        await triage(source, trees(), at=AT)


async def test_everything_absent_is_a_blind_board_not_an_error() -> None:
    result = await triage(FakeSource({}, present=set()), trees(), at=AT)
    assert result.blind
    assert not result.found
    assert {u.reasons[0].reason for u in result.unknown} == {T.METRIC_ABSENT, T.EXPORTER_ABSENT}


async def test_name_discovery_unsupported_still_triages() -> None:
    source = fleet(3)

    async def rejected(*_: object) -> set[str]:
        raise QueryRejected("match[] unsupported", url="http://vm:8428")

    source.metric_names = rejected  # type: ignore[method-assign,assignment]
    result = await board(source)
    assert [p.symptom for p in result.present] == ["backlog", "hit_low"]
    gpu = next(u for u in result.unknown if u.symptom == "gpu_idle")
    assert gpu.reasons[0].reason == T.NO_DATA


async def test_a_compound_detect_is_triaged_by_all_its_conditions() -> None:
    def part(id_: str, metric: str, compare: dict[str, Any]) -> dict[str, Any]:
        return {"id": id_, "title": TEXT, "query": f"max by ($target) ({metric})", "compare": compare}

    compound = Tree.model_validate(
        {
            "id": "slow_idle",
            "title": {"zh": "中", "en": "slow idle"},
            "target": ["namespace", "pod"],
            "detect": {
                "title": TEXT,
                "all": [
                    part("idle", "util_gauge", {"below": 40}),
                    part("slow", "e2e_gauge", {"ratio_above": 1.5, "baseline": "1d"}),
                ],
            },
            "nodes": [{"id": "m", "title": TEXT, "manual": TEXT}],
        }
    )
    util = {"vllm-0": 30.0, "vllm-1": 30.0, "vllm-2": 90.0}
    source = FakeSource(
        {
            "util_gauge": samples(util),
            "e2e_gauge": lambda at: samples(
                {"vllm-0": 3.0, "vllm-1": 1.0, "vllm-2": 3.0} if at == AT else pods(3, 1.0)
            ),
        }
    )
    result = await triage(source, [compound], at=AT)
    (present,) = result.present
    assert [h.labels["pod"] for h in present.hits] == ["vllm-0"]
    evidence = present.hits[0].evidence
    assert evidence is not None
    assert [c.check for c in evidence.conditions] == ["detect/idle", "detect/slow"]
    assert evidence.value == 30  # the first condition's number, not a sum of both


async def test_the_walk_reads_only_the_present_targets() -> None:
    source = fleet(100)
    result = await board(source)
    backlog = next(p for p in result.present if p.symptom == "backlog")
    assert [h.labels["pod"] for h in backlog.hits] == ["vllm-1", "vllm-0"]
    assert [h.cause.cause if h.cause else None for h in backlog.hits] == ["kv_full", None]
    [detect, *walked] = [q for q, _ in source.queries if "waiting_gauge" in q or "kv_used_gauge" in q]
    assert 'pod=~"' not in detect  # the detect reads every pod
    assert walked
    assert all('pod=~"vllm-0|vllm-1|"' in q for q in walked)


async def test_a_present_target_no_scope_can_name_is_walked_over_the_whole_scope() -> None:
    # A label value longer than any scope may carry (a hostile exporter) cannot narrow the walk:
    # the walk still runs, over every target, and the target still gets its cause.
    long_pod = "p" * 2000
    source = fleet(3)
    source.answers["waiting_gauge"] = samples({**pods(3, 1.0), long_pod: 30.0})
    source.answers["kv_used_gauge"] = samples({**pods(3, 0.5), long_pod: 0.97})
    result = await board(source)
    backlog = next(p for p in result.present if p.symptom == "backlog")
    assert [(h.labels["pod"], h.cause.cause if h.cause else None) for h in backlog.hits] == [(long_pod, "kv_full")]
    walked = [q for q, _ in source.queries if "kv_used_gauge" in q]
    assert walked
    assert all('pod=~"' not in q for q in walked)


async def test_a_strict_label_is_never_narrowed() -> None:
    # A strict matcher goes on every series (the peers and joins beside the target too): narrowing
    # it to the present targets would cut those off.
    source = fleet(10)
    await board(source, looking=Looking(strict_labels=frozenset({"pod"})))
    walked = [q for q, _ in source.queries if "kv_used_gauge" in q]
    assert walked
    assert all('pod=~"' not in q for q in walked)
