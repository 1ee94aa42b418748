"""Shared fixtures: a real Prometheus on loopback with backfilled series, stopped after each use."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from diagnosd.promlocal import LocalPrometheus, backfill
from diagnosd.promlocal.openmetrics import Series, write

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "rules"

StartPrometheus = Callable[..., LocalPrometheus]


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[StartPrometheus]:
    """start_prometheus(series=[...], query_log=True, scrape=[...]) -> a running LocalPrometheus."""
    started: list[LocalPrometheus] = []

    def start(series: Sequence[Series] = (), *, query_log: bool = False, **options: object) -> LocalPrometheus:
        work = tmp_path / f"prometheus-{len(started)}"
        work.mkdir()
        tsdb = work / "tsdb"
        if series:
            with (work / "series.om").open("w") as out:
                write(out, series)
            backfill(work / "series.om", tsdb)
        prom = LocalPrometheus(work, tsdb=tsdb, query_log=work / "queries.log" if query_log else None, **options)  # type: ignore[arg-type]
        started.append(prom)
        prom.start()
        return prom

    yield start
    for prom in started:
        prom.stop()
