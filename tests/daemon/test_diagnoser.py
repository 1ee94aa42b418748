"""The per-tree self-metrics a diagnosis leaves, read from /metrics of the in-process app against a
real Prometheus: a complete diagnosis moves its tree's last success to the injected clock's time; one
whose queries fail counts their kind and leaves the last success where it was."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.prometheus import api_error, in_front_of
from tests.serving import AT, build, fleet_prometheus, serve, settings

LATER = AT + timedelta(minutes=7)  # the clock, apart from the diagnosed instant `at`


@pytest.fixture(scope="module")
def fleet_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fleet_prometheus(tmp_path_factory.mktemp("fleet-prometheus")) as url:
        yield url


def per_tree(exposition: str) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """(last success by symptom, errors by (symptom, reason)) from a scrape."""
    success: dict[str, float] = {}
    errors: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            if s.name == "diagnosd_tree_last_success_timestamp_seconds":
                success[s.labels["symptom"]] = s.value
            elif s.name == "diagnosd_tree_errors_total":
                errors[(s.labels["symptom"], s.labels["reason"])] = s.value
    return success, errors


async def test_a_complete_diagnosis_sets_its_trees_last_success_to_the_clock(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path), clock=lambda: LATER)) as (client, _):
        start = per_tree((await client.get("/metrics")).text)
        response = await client.get("/diagnose/queue_backlog", params={"at": AT.isoformat()})
        success, errors = per_tree((await client.get("/metrics")).text)
    assert response.status_code == 200
    # Every loaded tree is there before any diagnosis: 0, never absent.
    assert start[0] == {"queue_backlog": 0.0, "kv_hit_low": 0.0}
    assert set(start[1]) == {
        (t, r) for t in start[0] for r in ("unavailable", "timeout", "deadline", "rejected", "protocol")
    }
    assert success == {"queue_backlog": LATER.timestamp(), "kv_hit_low": 0.0}
    assert set(errors.values()) == {0.0}


async def test_failing_queries_count_their_reason_and_leave_the_last_success(fleet_url: str, tmp_path: Path) -> None:
    async def kv_rejected(request: httpx.Request) -> httpx.Response | None:
        if b"kv_cache_usage" in request.content:
            return api_error(400, "bad_data", "1:1: parse error: unexpected character")
        return None

    async def unreachable(request: httpx.Request) -> None:
        raise httpx.ConnectError("connection refused", request=request)

    now = [AT]
    params = {"at": AT.isoformat()}
    async with serve(build(settings(fleet_url, tmp_path), clock=lambda: now[0])) as (client, _):
        assert (await client.get("/diagnose/queue_backlog", params=params)).status_code == 200
        now[0] = LATER
        async with in_front_of(fleet_url, kv_rejected):
            partial = await client.get("/diagnose/queue_backlog", params=params)
        async with in_front_of(fleet_url, unreachable):
            blind = await client.get("/diagnose/queue_backlog", params=params)
        success, errors = per_tree((await client.get("/metrics")).text)
    assert partial.status_code == 200  # the kv checks read unknown, the rest is answered
    assert blind.status_code == 503  # nothing could be looked at: said, not "no problem"
    assert success["queue_backlog"] == AT.timestamp()  # neither failed diagnosis moved it
    assert {key: value for key, value in errors.items() if value} == {
        ("queue_backlog", "rejected"): 1.0,
        ("queue_backlog", "unavailable"): 1.0,
    }
