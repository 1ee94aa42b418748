"""The circuit breaker around the shared source: when it opens, what it lets through, how its
cool-down grows, and what a readiness probe may do. The clock and the random source are injected
(no sleeps); the inner source is scripted, and the Prometheus client itself behind respx where
what matters is how its HTTP answers are told apart."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from datetime import UTC, datetime

import httpx
import pytest
import respx
from prometheus_client import CollectorRegistry

from diagnosd.errors import (
    CircuitOpen,
    DeadlineExceeded,
    QueryRejected,
    SourceError,
    SourceProtocolError,
    SourceTimeout,
    SourceUnavailable,
)
from diagnosd.sinks.metrics import Metrics
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.sources.base import Sample
from diagnosd.sources.circuit import JITTER, Circuit, CircuitSource, Policy, State
from diagnosd.sources.deadline import Deadline
from tests.fakes.prometheus import api_error, vector

URL = "http://prom.test:9090"
AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
POLICY = Policy(failures=3, cooldown=10.0, max_cooldown=60.0)


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """A source that answers `answer` (samples, or an error it raises) and counts what it was asked;
    with `gate` set, each call waits for it first."""

    def __init__(self) -> None:
        self.answer: list[Sample] | SourceError = [Sample({}, 1.0)]
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.calls += 1
        gate = self.gate  # the gate of the moment the call was made
        if gate is not None:
            await gate.wait()
        if isinstance(self.answer, SourceError):
            raise self.answer
        return self.answer

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        await self.query("names", start)
        return set(candidates)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        return None


def down() -> SourceUnavailable:
    return SourceUnavailable("cannot reach Prometheus: connection refused", url=URL)


def breaker(
    inner: Scripted, ticks: Ticks, rand: float = 0.0, policy: Policy = POLICY, metrics: Metrics | None = None
) -> CircuitSource:
    return CircuitSource(inner, Circuit(policy, URL, clock=ticks, rand=lambda: rand, watch=metrics))


async def fail(source: CircuitSource, times: int) -> list[SourceError]:
    errors = []
    for _ in range(times):
        with pytest.raises(SourceError) as raised:
            await source.query("up", AT)
        errors.append(raised.value)
    return errors


async def test_consecutive_failures_open_it_and_then_nothing_is_sent() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = down()
    await fail(source, POLICY.failures)
    assert source.circuit.status().state is State.OPEN
    [refused] = await fail(source, 1)
    assert inner.calls == POLICY.failures  # the fourth call never reached Prometheus
    assert isinstance(refused, CircuitOpen)
    assert refused.failures == POLICY.failures
    assert refused.retry_after == POLICY.cooldown
    assert refused.query == "up"
    assert refused.detail == (
        "circuit open after 3 consecutive failed calls (last: cannot reach Prometheus: connection refused); "
        "next probe in 10s"
    )


@pytest.mark.parametrize(
    "error",
    [
        SourceTimeout("no answer within 10s", url=URL),
        SourceProtocolError("HTTP 500 with a body that is not the API's JSON", url=URL, status=500),
        SourceUnavailable("HTTP 429 unavailable: slow down", url=URL, status=429),
    ],
)
async def test_timeouts_5xx_and_429_count_as_prometheus_unwell(error: SourceError) -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = error
    await fail(source, POLICY.failures)
    assert source.circuit.status().state is State.OPEN


@pytest.mark.parametrize(
    "error",
    [
        QueryRejected("HTTP 400 bad_data: parse error", url=URL, status=400),
        SourceProtocolError("instant query returned 'matrix', expected a vector", url=URL),
    ],
)
async def test_a_bad_query_says_nothing_of_prometheus_health(error: SourceError) -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = down()
    await fail(source, POLICY.failures - 1)
    inner.answer = error
    await fail(source, 10)
    status = source.circuit.status()
    assert (status.state, status.failures) == (State.CLOSED, POLICY.failures - 1)  # neither counted nor reset


async def test_an_answer_between_failures_resets_the_count() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    for _ in range(3):
        inner.answer = down()
        await fail(source, POLICY.failures - 1)
        inner.answer = [Sample({}, 1.0)]
        await source.query("up", AT)
    status = source.circuit.status()
    assert (status.state, status.failures) == (State.CLOSED, 0)


async def test_a_retry_after_opens_it_at_once_for_at_least_that_long() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = SourceUnavailable("HTTP 429: asked to be called again in 30s", url=URL, status=429, retry_after=30)
    await fail(source, 1)
    status = source.circuit.status()
    assert (status.state, status.probe_in) == (State.OPEN, 30.0)
    ticks.now += 29
    await fail(source, 1)
    assert inner.calls == 1


async def test_a_retry_after_is_honoured_up_to_max_cooldown_only() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = SourceUnavailable("HTTP 503", url=URL, status=503, retry_after=86400)
    await fail(source, 1)
    assert source.circuit.status().probe_in == POLICY.max_cooldown


async def test_after_the_cooldown_one_probe_goes_and_the_others_fail_fast() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = down()
    await fail(source, POLICY.failures)
    ticks.now += POLICY.cooldown
    inner.answer, inner.gate = [Sample({}, 1.0)], asyncio.Event()
    probe = asyncio.create_task(source.query("up", AT))
    await asyncio.sleep(0)  # the probe is in flight, held at the gate
    assert source.circuit.status().state is State.HALF_OPEN
    [meanwhile] = await fail(source, 1)
    assert isinstance(meanwhile, CircuitOpen)
    assert "half-open" in meanwhile.detail
    assert meanwhile.retry_after is None
    inner.gate.set()
    assert [s.value for s in await probe] == [1.0]
    status = source.circuit.status()
    assert (status.state, status.failures, status.openings) == (State.CLOSED, 0, 0)
    assert inner.calls == POLICY.failures + 1


async def test_each_failed_probe_doubles_the_cooldown_up_to_its_cap_and_success_resets_it() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = down()
    await fail(source, POLICY.failures)
    cooldowns = []
    for _ in range(5):
        wait = source.circuit.status().probe_in
        assert wait is not None
        cooldowns.append(wait)
        ticks.now += wait
        await fail(source, 1)  # the probe, failing
    assert cooldowns == [10.0, 20.0, 40.0, 60.0, 60.0]
    assert source.circuit.status().openings == 6
    ticks.now += 60
    inner.answer = [Sample({}, 1.0)]
    await source.query("up", AT)  # the probe, answered
    inner.answer = down()
    await fail(source, POLICY.failures)
    assert source.circuit.status().probe_in == POLICY.cooldown  # the backoff starts over


async def test_jitter_only_shortens_a_cooldown_and_by_at_most_its_share() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks, rand=0.999999)
    inner.answer = down()
    await fail(source, POLICY.failures)
    wait = source.circuit.status().probe_in
    assert wait is not None
    assert POLICY.cooldown * (1 - JITTER) <= wait < POLICY.cooldown
    assert wait == pytest.approx(POLICY.cooldown * (1 - JITTER), rel=1e-5)


async def test_a_probe_given_up_lets_the_next_caller_probe() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = down()
    await fail(source, POLICY.failures)
    ticks.now += POLICY.cooldown
    inner.answer, inner.gate = [Sample({}, 1.0)], asyncio.Event()
    probe = asyncio.create_task(source.query("up", AT))
    await asyncio.sleep(0)
    probe.cancel()  # its diagnosis gave up (a deadline, a shutdown)
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert source.circuit.status().state is State.OPEN
    inner.gate = None
    await source.query("up", AT)  # due at once: no new cool-down for a probe that proved nothing
    assert source.circuit.status().state is State.CLOSED


async def test_calls_cut_off_by_the_diagnosis_deadline_count_as_timeouts() -> None:
    """A hanging Prometheus whose timeout times the retries outlasts the deadline is still seen."""
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.gate = asyncio.Event()  # never set: no answer, ever
    for _ in range(POLICY.failures):
        with pytest.raises(DeadlineExceeded):
            await Deadline(0.01, URL).bound(source).query("up", AT)
    status = source.circuit.status()
    assert status.state is State.OPEN
    assert status.last == "no answer by the diagnosis deadline"


async def test_an_answer_sent_before_it_opened_does_not_close_it() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    gate = inner.gate = asyncio.Event()
    slow = asyncio.create_task(source.query("slow", AT))
    await asyncio.sleep(0)  # sent while closed, held
    inner.gate, inner.answer = None, down()
    await fail(source, POLICY.failures)
    inner.answer = [Sample({}, 1.0)]
    gate.set()
    assert [s.value for s in await slow] == [1.0]  # its caller gets its answer...
    assert source.circuit.status().state is State.OPEN  # ...but it says nothing of Prometheus now


async def test_a_readiness_check_counts_failures_but_never_resets_them() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = down()
    await fail(source, POLICY.failures - 1)
    inner.answer = [Sample({}, 1.0)]
    for _ in range(10):
        await source.check("vector(1)", AT)
    assert source.circuit.status().failures == POLICY.failures - 1
    inner.answer = down()
    with pytest.raises(SourceUnavailable):
        await source.check("vector(1)", AT)
    assert source.circuit.status().state is State.OPEN


async def test_while_open_a_readiness_check_sends_nothing_and_may_be_the_probe_when_due() -> None:
    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks)
    inner.answer = down()
    await fail(source, POLICY.failures)
    inner.answer = [Sample({}, 1.0)]
    for _ in range(20):  # a kubelet asking every few seconds
        with pytest.raises(CircuitOpen):
            await source.check("vector(1)", AT)
    assert inner.calls == POLICY.failures
    ticks.now += POLICY.cooldown
    await source.check("vector(1)", AT)
    assert source.circuit.status().state is State.CLOSED
    assert inner.calls == POLICY.failures + 1


async def test_transitions_reach_the_metrics() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)

    def state() -> float | None:
        return registry.get_sample_value("diagnosd_prometheus_circuit_state")

    inner, ticks = Scripted(), Ticks()
    source = breaker(inner, ticks, metrics=metrics)
    inner.answer = down()
    await fail(source, POLICY.failures)
    assert state() == 2
    ticks.now += POLICY.cooldown
    await fail(source, 1)  # a failed probe: open again, a second opening
    assert registry.get_sample_value("diagnosd_prometheus_circuit_opened_total") == 2
    ticks.now += 2 * POLICY.cooldown
    inner.answer, inner.gate = [Sample({}, 1.0)], asyncio.Event()
    probe = asyncio.create_task(source.query("up", AT))
    await asyncio.sleep(0)
    assert state() == 1
    inner.gate.set()
    await probe
    assert state() == 0
    assert registry.get_sample_value("diagnosd_prometheus_circuit_opened_total") == 2


@pytest.mark.respx(base_url=URL, using="httpx")
async def test_the_client_s_answers_are_told_apart(respx_mock: respx.MockRouter) -> None:
    """Through the real client: 5 rejected queries keep it closed; 3 HTTP 500s open it."""
    config = PrometheusConfig(url=URL, retries=0, backoff=0.0)
    route = respx_mock.post("/api/v1/query")
    async with config.client() as client:
        source = CircuitSource(PrometheusSource(config, client), Circuit(POLICY, URL, clock=Ticks()))
        route.mock(return_value=api_error(400, "bad_data", "parse error"))
        for _ in range(5):
            with pytest.raises(QueryRejected):
                await source.query("up{", AT)
        assert source.circuit.status().state is State.CLOSED
        route.mock(return_value=httpx.Response(500, text="<html>upstream exploded</html>"))
        for _ in range(POLICY.failures):
            with pytest.raises(SourceProtocolError):
                await source.query("up", AT)
        sent = route.call_count
        route.mock(return_value=vector(({}, "1")))
        with pytest.raises(CircuitOpen):
            await source.query("up", AT)
    assert source.circuit.status().state is State.OPEN
    assert route.call_count == sent
