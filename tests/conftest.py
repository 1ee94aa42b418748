"""Shared fixtures: a real Prometheus on loopback with backfilled series, stopped after each use; a
real PostgreSQL for the session, a new empty schema of it for each test that asks for one."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from diagnosd.promlocal import LocalPrometheus, backfill
from diagnosd.promlocal.openmetrics import Series, write
from tests.postgres import LocalPostgres, PostgresMissing, local_postgres

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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[LocalPostgres]:
    """A real PostgreSQL for the whole session; skipped where it is not installed, except in CI."""
    try:
        with local_postgres() as server:
            yield server
    except PostgresMissing as missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI must install PostgreSQL: {missing}")
        pytest.skip(str(missing))


@pytest.fixture
def postgres_url(postgres_server: LocalPostgres) -> str:
    """The URL of a new, empty place for a store of its own (dropped with the server)."""
    return postgres_server.fresh_url()


@pytest.fixture(params=["sqlite", "postgres"])
def database_location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """Where a store's database is, on each backend: a new SQLite file, a new PostgreSQL schema."""
    if request.param == "sqlite":
        return tmp_path / "diagnosd.db"
    url: str = request.getfixturevalue("postgres_url")
    return url
