"""The storm benchmark's recording table (bench/bench_storm.py --records-only) on each backend: both
ways record every alert of the batch (the benchmark checks it and stops otherwise) and print a
ratio for every batch size. Not a timing test: no figure is held to a target."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.conftest import Bench


@pytest.fixture
def bench_storm(bench: Bench) -> ModuleType:
    return bench("bench_storm")


def test_both_ways_record_every_alert_of_a_batch(
    bench_storm: ModuleType, database_location: Path | str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench_storm.print_batch_records(database_location, "here", 1, sizes=(1, 120))  # 120: past one chunk
    lines = capsys.readouterr().out.splitlines()
    assert [int(re.findall(r"batch of +(\d+)", line)[0]) for line in lines] == [1, 120]
    assert all(re.search(r"\(x\d+\.\d\)$", line) for line in lines)
