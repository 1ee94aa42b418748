"""Where the trees read, derived from their queries and params: the looks, the dense windows and
the history the drills simulate, and a drill's Prometheus holding the week tpot_high's peak reads."""

from __future__ import annotations

import asyncio
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from diagnosd.daemon import compose
from diagnosd.drills import windows
from diagnosd.drills.verify import backfilled
from diagnosd.engine.params import duration, effective
from diagnosd.promlocal import LocalPrometheus
from diagnosd.sim import scenario
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.trees import promql
from diagnosd.trees.model import Tree, queries
from tests.sim.conftest import ANCHOR

TEXT = {"zh": "中", "en": "en"}
MINUTE, HOUR, DAY = 60.0, 3600.0, 86400.0


def make_tree(*nodes: dict[str, Any], **params: str) -> Tree:
    """ITL against its baseline; each node a check under it."""
    defaults = {"window": "10m", "baseline": "1d", **params}
    return Tree.model_validate(
        {
            "id": "slow",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "params": {name: {"default": value, "doc": "d"} for name, value in defaults.items()},
            "detect": {
                "title": TEXT,
                "query": "max by ($target) (rate(itl_sum[$window]))",
                "compare": {"ratio_above": 1.5, "baseline": "$baseline"},
            },
            "nodes": list(nodes),
        }
    )


def check(id_: str, query: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": id_,
        "title": TEXT,
        "query": query,
        "compare": {"below": 0.85},
        "conclusion": {"cause": id_, "title": TEXT, "remediation": [TEXT]},
        **extra,
    }


PEAK = check(
    "clock_drop",
    "min by ($target) (avg_over_time(clock[$window]) / max_over_time(clock[$peak_window]))",
)


def test_a_week_long_peak_and_a_day_old_baseline() -> None:
    tree = make_tree(PEAK, peak_window="7d")
    assert windows.looks([tree]) == {
        windows.Look(0.0, 10 * MINUTE): {"itl_sum", "clock"},  # the detect now, the check's current value
        windows.Look(DAY, 10 * MINUTE): {"itl_sum"},  # the detect a baseline earlier
        windows.Look(0.0, 7 * DAY): {"clock"},  # the check's peak
    }
    plan = windows.plan(windows.looks([tree]))
    # The peak is too long to tick densely: the history only reaches back that far (and an hour
    # before, whole coarse steps), and an hour beyond the baseline's window only its metric is kept.
    assert plan.dense == ((0.0, 10 * MINUTE), (DAY, 10 * MINUTE))
    assert plan.history == 7 * DAY + windows.MARGIN
    assert plan.far == DAY + 10 * MINUTE + windows.MARGIN + 5 * MINUTE  # in whole quarter hours
    assert plan.far_names == {"clock"}
    # Without the peak nothing lies beyond the short windows.
    assert windows.plan(windows.looks([make_tree(check("c", "max by ($target) (c)"))])).far_names == frozenset()


def test_an_overridden_baseline_moves_its_window() -> None:
    tree = make_tree(PEAK, peak_window="7d")
    plan = windows.plan(windows.looks([tree], {"slow": {"baseline": "2d", "window": "5m"}}))
    assert plan.dense == ((0.0, 5 * MINUTE), (2 * DAY, 5 * MINUTE))
    shorter = windows.plan(windows.looks([tree], {"slow": {"peak_window": "3d"}}))
    assert shorter.history == 3 * DAY + windows.MARGIN


def test_offsets_subqueries_and_sustained_checks_read_where_they_say() -> None:
    steady = check("steady", "max by ($target) (max_over_time((used / total)[1h:1m] offset 30m))")
    queued = check("queued", "max by ($target) (waiting)", sustained={"for": "15m"})
    old = check("old", "count by ($target) (kube_pod_created offset 45m)")
    found = windows.looks([make_tree(steady, queued, old)])
    # A subquery widens what its selectors read by its range and moves it by its offset; an
    # instant selector reads Prometheus' lookback; a sustained check reads its whole `for`.
    assert windows.Look(30 * MINUTE, HOUR + windows.LOOKBACK) in found
    assert windows.Look(0.0, 15 * MINUTE + windows.LOOKBACK) in found
    assert windows.Look(45 * MINUTE, windows.LOOKBACK) in found
    # All of them lie within the last hour and three quarters: one dense window, nearest first.
    assert windows.plan(found).dense[0] == (0.0, 30 * MINUTE + HOUR + windows.LOOKBACK)


def test_a_diagnosis_at_another_moment_reads_from_there() -> None:
    tree = make_tree(check("now", "max by ($target) (running)"))
    moments = [DAY + m * MINUTE for m in (45, 30, 15)]
    found = windows.joined(*(windows.looks([tree], at=at) for at in moments))
    assert {windows.Look(at, 10 * MINUTE) for at in moments} <= found.keys()  # the detect there
    assert {windows.Look(at + DAY, 10 * MINUTE) for at in moments} <= found.keys()  # and its baseline
    assert {windows.Look(at, windows.LOOKBACK) for at in moments} <= found.keys()  # the check there
    # Five minutes apart, less than a coarse step: one dense window each day back.
    assert windows.plan(found).dense == ((DAY + 15 * MINUTE, 40 * MINUTE), (2 * DAY + 15 * MINUTE, 40 * MINUTE))


def test_windows_that_overlap_or_lie_close_are_joined() -> None:
    looks = [windows.Look(0, 600), windows.Look(300, 600), windows.Look(900, 60), windows.Look(1200, 60)]
    assert windows.merged(looks) == ((0, 960), (1200, 60))
    assert windows.merged(looks, gap=240) == ((0, 1260),)
    assert windows.merged([*looks, windows.Look(DAY, 600)], gap=900) == ((0, 1260), (DAY, 600))


def test_the_shipped_trees_need_their_longest_window_of_history() -> None:
    rules = compose.load()
    plan = windows.plan(windows.looks(rules.ruleset.trees.values()))
    tpot = rules.ruleset.tree("tpot_high")
    assert tpot is not None
    peak = duration("$peak_window", effective(tpot)).total_seconds()
    assert plan.history >= peak
    assert all(window <= windows.SHORT for _, window in plan.dense)


@pytest.mark.slow
def test_a_drills_prometheus_holds_the_week_the_peak_clock_reads() -> None:
    """tpot_high's peak clock is a max over 7 days: the drill's history must reach back that far."""
    rules = compose.load()
    tpot = rules.ruleset.tree("tpot_high")
    assert tpot is not None
    values = effective(tpot)
    peak = duration("$peak_window", values)
    query = next(text for key, text in queries(tpot) if key == "gpu_clock_throttled/clock_drop")
    clock = sorted(promql.selector_names(promql.parse(promql.substitute(query, values, tpot.target))))[0]
    fault = scenario.load("gpu_clock_throttled")
    with tempfile.TemporaryDirectory(prefix="diagnosd-windows-") as tmp:
        work = Path(tmp)
        tsdb = backfilled([fault], rules, work, anchor=ANCHOR, seed=0, parallel=False)
        with LocalPrometheus(work / "prometheus", tsdb=tsdb) as prom:
            # The earliest sample of each GPU's clock within the peak window, seen at the anchor.
            earliest = f"min(min_over_time(timestamp({clock})[{promql.format_duration(peak)}:15m]))"
            [value] = asyncio.run(_instant(prom.url, earliest))
    # Hourly samples reach back to the start of the window.
    assert value <= ANCHOR - peak.total_seconds() + HOUR


async def _instant(url: str, query: str) -> list[float]:
    config = PrometheusConfig(url=url, timeout=60.0)
    async with config.client() as client:
        samples = await PrometheusSource(config, client).query(query, datetime.fromtimestamp(ANCHOR, UTC))
    return [s.value for s in samples]
