"""The benchmark harness (bench/harness.py) at N = 10, on a real Prometheus: it completes and reports
every figure of its table, for every tree. Not a timing test: no figure is held to a target."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import ModuleType

import pytest

from diagnosd.daemon import compose
from tests.bench.conftest import Bench

UNITS = re.compile(r"(ms|x|MiB|%)$")


@pytest.fixture
def harness(bench: Bench) -> ModuleType:
    return bench("harness")


@pytest.mark.slow
def test_the_harness_reports_every_figure_at_ten_pods(harness: ModuleType, tmp_path: Path) -> None:
    rows = harness.run([10], repeats=1, workdir=tmp_path)
    [row] = rows
    figures = [row.series, row.asked, row.sent, row.round_seconds, row.triage_queries, row.triage_seconds]
    figures += [row.rss_mib, row.json_share, row.prometheus_cpu]
    assert all(math.isfinite(v) and v >= 0 for v in figures), row
    assert min(row.series, row.asked, row.sent, row.triage_queries, row.rss_mib, row.prometheus_cpu) > 0
    assert row.sent <= row.asked  # the round's memo never sends more than was asked
    trees = set(compose.load().ruleset.trees)
    assert set(row.overheads) == trees
    assert all(math.isfinite(v) and v > 0 for v in row.overheads.values()), row.overheads

    lines = harness.table(rows)
    assert all(column in lines[0] for column in harness.COLUMNS)
    cells = lines[1].split()
    assert len(cells) == len(harness.COLUMNS) + 1  # every column filled, and the worst tree named
    assert all(math.isfinite(float(UNITS.sub("", cell))) for cell in cells[:-1]), cells
    assert cells[-1] in trees
    per_tree = {line.split()[0]: float(line.split()[1]) for line in lines[4:]}
    assert set(per_tree) == trees
