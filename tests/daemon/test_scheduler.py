"""Rounds against a real Prometheus: findings across the fleet, `for`, isolation of a failing tree,
and APScheduler skipping (never stacking) a round that overruns its interval."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from pydantic import SecretStr

from diagnosd.daemon.scheduler import Scheduler
from diagnosd.daemon.settings.model import StoreSettings
from diagnosd.findings.lifecycle import State, Trigger
from diagnosd.findings.store import FindingQuery
from tests.fakes.prometheus import in_front_of
from tests.findings.builders import diagnosis
from tests.postgres import LocalPostgres
from tests.serving import AT, build, counted, fleet_prometheus, serve, settings


@pytest.fixture(scope="module")
def fleet_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fleet_prometheus(tmp_path_factory.mktemp("fleet-prometheus")) as url:
        yield url


async def poll(condition: Callable[[], bool], seconds: float = 10) -> None:
    async with asyncio.timeout(seconds):
        while not condition():  # noqa: ASYNC110 - the condition is another task's progress
            await asyncio.sleep(0.01)


async def test_a_round_records_findings_where_the_symptom_holds(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, services):
        result = await services.scheduler.run_round()
        findings = (await client.get("/findings")).json()["findings"]
        metrics = (await client.get("/metrics")).text
    assert result.outcome == "ok"
    assert result.trees == {"queue_backlog": "ok", "kv_hit_low": "ok"}
    assert sorted((f["symptom"], f["cause"], f["labels"]["pod"], f["state"]) for f in findings) == [
        ("kv_hit_low", "prefix_cache_disabled", "vllm-1", "firing"),
        ("queue_backlog", "kv_pool_full", "vllm-0", "firing"),
    ]
    assert counted(services.metrics.rounds, outcome="ok") == 1
    assert next(iter(services.metrics.last_round.collect())).samples[0].value == AT.timestamp()
    assert 'diagnosd_symptom_active{namespace="prod",pod="vllm-2",symptom="queue_backlog"} 1.0' in metrics
    assert 'diagnosd_symptom_active{namespace="prod",pod="vllm-1",symptom="queue_backlog"}' not in metrics


async def test_a_narrowed_round_finds_what_the_whole_round_finds(fleet_url: str, tmp_path: Path) -> None:
    """Rounds walk each tree where its symptom is not clear (the default): the same findings and
    symptoms as the whole walk, every clear target's detect value; its other checks' values are
    what the whole walk adds. Every tree of the fleet, so that each clear target is met."""
    seen: dict[str, tuple[object, ...]] = {}
    for walk in ("whole", "narrowed"):
        config = settings(fleet_url, tmp_path / walk, scheduler={"walk": walk, "symptoms": []})
        async with serve(build(config)) as (client, services):
            result = await services.scheduler.run_round()
            findings = (await client.get("/findings")).json()["findings"]
            metrics = (await client.get("/metrics")).text.splitlines()
        seen[walk] = (
            result.outcome,
            sorted((f["symptom"], f["cause"], str(sorted(f["labels"].items())), f["state"]) for f in findings),
            sorted(line for line in metrics if line.startswith("diagnosd_symptom_active{")),
            {line for line in metrics if line.startswith("diagnosd_check_value{")},
        )
    whole, narrowed = seen["whole"], seen["narrowed"]
    assert narrowed[:3] == whole[:3]
    assert whole[0] == "ok"
    assert len(whole[1]) >= 2  # not vacuous: the fleet's faults were found
    detects = {line for line in whole[3] if 'check="detect"' in line}
    assert detects <= narrowed[3] < whole[3]
    # A clear target (vllm-1 has no backlog) keeps its detect and loses its branches' values.
    clear = [line for line in whole[3] if 'pod="vllm-1"' in line and 'symptom="queue_backlog"' in line]
    assert any('check="detect"' not in line for line in clear)
    assert [line for line in clear if line in narrowed[3]] == [line for line in clear if 'check="detect"' in line]


async def test_for_keeps_round_findings_pending_until_it_has_passed(fleet_url: str, tmp_path: Path) -> None:
    now = [AT]
    config = settings(fleet_url, tmp_path, findings={"for": "1m"}, scheduler={"symptoms": ["queue_backlog"]})
    async with serve(build(config, clock=lambda: now[0])) as (_, services):
        states = []
        for seconds in (0, 30, 60):
            now[0] = AT + timedelta(seconds=seconds)
            await services.scheduler.run_round()
            states.append([f.state for f in services.tracker.active()])
    assert states == [[State.PENDING], [State.PENDING], [State.FIRING]]


async def test_one_failing_tree_never_stops_the_round(
    fleet_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def bug(request: httpx.Request) -> httpx.Response | None:
        if b"prefix_cach" in request.content or b"prefix_cach" in str(request.url).encode():
            raise RuntimeError("a bug somewhere below the engine")
        return None

    built = build(settings(fleet_url, tmp_path))
    async with in_front_of(fleet_url, bug), serve(built) as (_, services):
        result = await services.scheduler.run_round()
        causes = [f.cause for f in services.store.findings(FindingQuery())]
    assert result.outcome == "partial"
    assert result.trees == {"queue_backlog": "ok", "kv_hit_low": "error"}
    assert causes == ["kv_pool_full"]
    assert "round: kv_hit_low failed" in caplog.text
    assert counted(services.metrics.diagnoses, trigger="round", outcome="error") == 1


async def test_an_overrunning_round_is_skipped_not_stacked(
    fleet_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def slow(request: httpx.Request) -> None:
        await asyncio.sleep(0.3)

    config = settings(fleet_url, tmp_path, scheduler={"interval": "100ms"})
    built = build(config)
    async with in_front_of(fleet_url, slow), serve(built) as (_, services):
        live = config.model_copy(update={"scheduler": config.scheduler.model_copy(update={"enabled": True})})
        scheduler = Scheduler(
            live,
            services.diagnoser,
            services.tracker,
            services.store,
            services.memory,
            services.inbox,
            services.metrics,
            built.clock,
        )
        running = peak = finished = 0
        original = scheduler.run_round

        async def watched() -> object:
            nonlocal running, peak, finished
            running += 1
            peak = max(peak, running)
            try:
                return await original()
            finally:
                running -= 1
                finished += 1

        scheduler.run_round = watched  # type: ignore[method-assign,assignment]
        scheduler.start()
        await poll(lambda: finished >= 2)
        await poll(lambda: running == 1)
        in_flight = running
        await scheduler.stop()  # cancels the round in flight, without an error
        skipped = counted(services.metrics.rounds, outcome="skipped")
    assert finished >= 2
    assert (in_flight, running) == (1, 0)
    assert peak == 1
    assert skipped >= 1
    assert "raised an exception" not in caplog.text


async def test_housekeeping_applies_retention(fleet_url: str, tmp_path: Path) -> None:
    now = [AT]
    config = settings(fleet_url, tmp_path, store={"retention": "1h"})
    async with serve(build(config, clock=lambda: now[0])) as (_, services):
        await services.scheduler.run_round()
        now[0] = AT + timedelta(minutes=1)
        for symptom in ("queue_backlog", "kv_hit_low"):  # every target gone from complete rounds
            empty = diagnosis(symptom=symptom)
            services.tracker.record(empty, trigger=Trigger.ROUND, now=now[0], for_=timedelta(0), complete_scope={})
        resolved = services.store.findings(FindingQuery(states=(State.RESOLVED,)))
        services.memory.remember(("old", "firing", "t"), {}, "done", now[0])
        now[0] = AT + timedelta(hours=2)
        await services.scheduler.housekeeping()
        after = services.store.findings(FindingQuery())
        states = services.tracker.states(now[0], timedelta(days=1))
        delivery = services.memory.alert(("old", "firing", "t"))
    assert len(resolved) == 2
    assert after == []
    assert states == []
    assert delivery is None


async def test_replicas_on_one_postgresql_take_turns_at_rounds(
    fleet_url: str, tmp_path: Path, postgres_url: str, postgres_server: LocalPostgres
) -> None:
    """One replica runs the rounds, the other stands by and reads its findings; when the first one's
    session dies (a crash, a lost network), the survivor's next round runs."""
    config = settings(fleet_url, tmp_path).model_copy(update={"store": StoreSettings(url=SecretStr(postgres_url))})
    async with AsyncExitStack() as stack:
        _, first = await stack.enter_async_context(serve(build(config)))
        client, second = await stack.enter_async_context(serve(build(config)))
        led = await first.scheduler.scheduled_round()
        assert led is not None
        assert led.outcome == "ok"
        assert await second.scheduler.scheduled_round() is None
        assert counted(second.metrics.rounds, outcome="standby") == 1
        findings = (await client.get("/findings")).json()["findings"]
        assert sorted(f["labels"]["pod"] for f in findings) == ["vllm-0", "vllm-1"]
        [(pid,)] = first.store.database.rows("SELECT pg_backend_pid()")
        postgres_server.admin(f"SELECT pg_terminate_backend({int(pid)}, 10000)")
        took_over = await second.scheduler.scheduled_round()
        assert took_over is not None
        assert took_over.outcome == "ok"
        assert await first.scheduler.scheduled_round() is None  # back on a new session: standby
