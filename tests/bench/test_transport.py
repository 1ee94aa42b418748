"""bench/transport.py at N = 10, on a real Prometheus: both transports measured, every figure and
ratio reported. Not a timing test: which transport is faster is the benchmark's to say."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from types import ModuleType

import pytest

from diagnosd.promlocal import LocalPrometheus
from tests.bench.conftest import Bench


@pytest.fixture
def transport(bench: Bench) -> ModuleType:
    return bench("transport")


@pytest.mark.slow
def test_both_transports_are_measured_side_by_side_at_ten_pods(
    bench: Bench, transport: ModuleType, tmp_path: Path
) -> None:
    here = bench("prom_queries").fleet(10, tmp_path)
    with LocalPrometheus(here / "transport", tsdb=here / "tsdb") as prom:
        found = asyncio.run(transport.compare(prom.url, here, 1))
    assert set(found) == {"aiohttp", "httpx"}
    for figures in found.values():
        assert set(figures) == {"round", "cpu", "overhead"}
        assert all(math.isfinite(v) and v > 0 for v in figures.values()), figures
    lines = transport.table({10: found})
    assert len(lines) == 2 + 3  # head, rule, a line per figure
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == "10"
        assert all(math.isfinite(float(c)) for c in cells[2:]), cells
