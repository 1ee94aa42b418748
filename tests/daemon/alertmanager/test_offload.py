"""Alert batches diagnosed in a process of their own, against a real Prometheus: the same parts as
on the event loop, the child's self-metrics counted by the daemon's, errors crossing back with
their data, the daemon's clock crossing with each batch, a killed child replaced, and close()
leaving no process behind."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

import pytest
from prometheus_client import CollectorRegistry

from diagnosd.daemon import compose
from diagnosd.daemon.alertmanager import offload
from diagnosd.daemon.alertmanager.offload import Offloaded
from diagnosd.daemon.alertmanager.parts import OnLoop
from diagnosd.daemon.settings.model import Settings
from diagnosd.engine import Scope
from diagnosd.errors import DiagnosisProcessLost, SourceUnavailable, UnknownSymptom
from diagnosd.promlocal import free_port
from diagnosd.sinks.metrics import Metrics
from diagnosd.sources.circuit import Circuit, Policy
from diagnosd.trees import RuleSet
from tests.conftest import StartPrometheus
from tests.fakes.standin import StandIn
from tests.serving import AT, counted, fleet, settings, wait_until

PODS = ("vllm-0", "vllm-1", "vllm-2")
SCOPES = [{"namespace": "prod", "pod": pod} for pod in PODS]
BATCH = Scope.among({"namespace": ["prod"], "pod": list(PODS)})


@asynccontextmanager
async def offloaded(config: Settings, metrics: Metrics) -> AsyncIterator[Offloaded]:
    parting = Offloaded(compose.batch_diagnoser, config, rules(config), metrics, lambda: AT, processes=1)
    try:
        yield parting
    finally:
        await parting.close()


def rules(config: Settings) -> RuleSet:
    return compose.build(config, registry=CollectorRegistry()).rules.ruleset


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def wait_gone(pid: int, within: float = 10.0) -> None:
    """Until `pid` is dead and reaped (the executor reaps its children)."""
    deadline = time.monotonic() + within
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


async def test_a_batch_diagnosed_in_a_process_is_the_one_diagnosed_on_the_loop(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    prom = start_prometheus(fleet())
    config = settings(prom.url, tmp_path)
    here, there = Metrics(CollectorRegistry()), Metrics(CollectorRegistry())
    async with compose.batch_diagnoser(
        config, rules(config), here, lambda: AT, Circuit(Policy(), config.prometheus.url)
    ) as diagnoser:
        on_loop = await OnLoop(diagnoser).parts("queue_backlog", BATCH, AT, SCOPES)
    async with offloaded(config, there) as parting:
        apart = await parting.parts("queue_backlog", BATCH, AT, SCOPES)
        [pid] = parting.pids()
    assert pid != os.getpid()
    assert apart == on_loop
    # Each alert its own pod; vllm-0's backlog from its full KV pool, vllm-2's not from it.
    assert [[t.labels["pod"] for t in part.targets] for part in apart] == [[pod] for pod in PODS]
    causes = {part.targets[0].labels["pod"]: [c.cause for c in part.targets[0].root_causes] for part in apart}
    assert causes["vllm-0"][:1] == ["kv_pool_full"]
    assert causes["vllm-1"] == []
    # The child's Diagnoser reported to the daemon's metrics exactly what the loop's reported.
    for metrics in (here, there):
        assert counted(metrics.diagnoses, trigger="alert", outcome="ok") == 1
    sent = counted(here.queries, endpoint="query")
    assert sent > 0
    assert counted(there.queries, endpoint="query") == sent
    # Its success is stamped with the daemon's clock (AT, long past), not the child's own.
    success = there.tree_last_success.labels("queue_backlog")._value.get()
    assert success == AT.timestamp()


async def test_errors_cross_back_with_their_data_and_are_counted(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    metrics = Metrics(CollectorRegistry())
    async with offloaded(settings(url, tmp_path), metrics) as parting:
        with pytest.raises(UnknownSymptom) as unknown:
            await parting.parts("no_such_symptom", BATCH, AT, SCOPES)
        with pytest.raises(SourceUnavailable) as down:
            await parting.parts("queue_backlog", BATCH, AT, SCOPES)
    assert unknown.value.symptom == "no_such_symptom"
    assert "queue_backlog" in unknown.value.known
    assert down.value.url.startswith(url)  # the endpoint it could not reach
    assert counted(metrics.diagnoses, trigger="alert", outcome="error") == 1
    # Its first call (which metrics exist) found Prometheus unreachable, counted here as there.
    assert counted(metrics.query_errors, endpoint="metric_names", error="unavailable") > 0
    assert metrics.tree_errors.labels("queue_backlog", "unavailable")._value.get() == 1


async def test_a_process_killed_idle_costs_the_next_batch_nothing(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    prom = start_prometheus(fleet())
    async with offloaded(settings(prom.url, tmp_path), Metrics(CollectorRegistry())) as parting:
        await parting.parts("queue_backlog", BATCH, AT, SCOPES)
        [first] = parting.pids()
        os.kill(first, signal.SIGKILL)
        await asyncio.to_thread(wait_gone, first)
        again = await parting.parts("queue_backlog", BATCH, AT, SCOPES)
        [second] = parting.pids()
    assert second != first
    assert [len(part.targets) for part in again] == [1, 1, 1]


async def test_a_process_killed_mid_batch_fails_that_batch_and_the_next_is_diagnosed(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    prom = start_prometheus(fleet())
    with StandIn(hang=True) as hanging:
        metrics = Metrics(CollectorRegistry())
        async with offloaded(settings(hanging.url, tmp_path), metrics) as parting:
            batch = asyncio.create_task(parting.parts("queue_backlog", BATCH, AT, SCOPES))
            # The child is diagnosing: it asked, and waits for the answer.
            await asyncio.to_thread(wait_until, lambda: hanging.seen, 20, "the batch's first request")
            [first] = parting.pids()
            os.kill(first, signal.SIGKILL)
            with pytest.raises(DiagnosisProcessLost) as lost:
                await batch
    async with offloaded(settings(prom.url, tmp_path), metrics) as parting:
        again = await parting.parts("queue_backlog", BATCH, AT, SCOPES)
    assert lost.value.symptom == "queue_backlog"
    assert [len(part.targets) for part in again] == [1, 1, 1]


async def test_close_leaves_no_process_behind(tmp_path: Path, start_prometheus: StartPrometheus) -> None:
    prom = start_prometheus(fleet())
    config = settings(prom.url, tmp_path)
    parting = Offloaded(
        compose.batch_diagnoser, config, rules(config), Metrics(CollectorRegistry()), lambda: AT, processes=2
    )
    await parting.parts("queue_backlog", BATCH, AT, SCOPES)
    pids = parting.pids()
    started = time.monotonic()
    await parting.close()
    assert pids
    assert all(gone(pid) for pid in pids)
    assert time.monotonic() - started < timedelta(seconds=10).total_seconds()


async def test_where_no_process_can_start_the_batches_are_diagnosed_on_the_loop(
    tmp_path: Path, start_prometheus: StartPrometheus, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tried: list[int] = []

    def refused(*args: object, **kwargs: object) -> NoReturn:
        tried.append(1)  # as the executor's locks fail where /dev/shm is missing or read-only
        raise PermissionError(13, "Permission denied", "/dev/shm/sem.mp-1")

    monkeypatch.setattr(offload, "ProcessPoolExecutor", refused)
    prom = start_prometheus(fleet())
    config = settings(prom.url, tmp_path)
    async with compose.batch_diagnoser(
        config, rules(config), Metrics(CollectorRegistry()), lambda: AT, Circuit(Policy(), config.prometheus.url)
    ) as diagnoser:
        loop = OnLoop(diagnoser)
        expected = await loop.parts("queue_backlog", BATCH, AT, SCOPES)
        without = Offloaded(
            compose.batch_diagnoser, config, rules(config), Metrics(CollectorRegistry()), lambda: AT, processes=1
        )
        with pytest.raises(PermissionError):
            await without.parts("queue_backlog", BATCH, AT, SCOPES)
        parting = Offloaded(
            compose.batch_diagnoser,
            config,
            rules(config),
            Metrics(CollectorRegistry()),
            lambda: AT,
            processes=1,
            fallback=loop,
        )
        first = await parting.parts("queue_backlog", BATCH, AT, SCOPES)
        second = await parting.parts("queue_backlog", BATCH, AT, SCOPES)
        await parting.close()
    assert first == second == expected
    assert len(tried) == 2  # once for the one without a fallback, once for the other: not at every batch
    assert parting.pids() == []
    [logged] = [r for r in caplog.records if "cannot start a diagnosis process" in r.getMessage()]
    assert logged.levelname == "ERROR"
    assert "Permission denied" in logged.getMessage()
