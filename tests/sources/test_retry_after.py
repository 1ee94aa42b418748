"""Retry-After on a 429 or 503 (the HTTP API faked with respx): never retried sooner than it asks;
when it asks for longer than the diagnosis can wait, the call fails at once saying when to come
back. The pauses are recorded by an injected sleep, not waited out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import respx

from diagnosd.errors import SourceProtocolError, SourceUnavailable
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.sources.deadline import Deadline
from diagnosd.sources.prometheus import retry_after
from tests.fakes.prometheus import api_error, vector

URL = "http://prom.test:9090"
NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
Connect = Callable[..., PrometheusSource]

pytestmark = pytest.mark.respx(base_url=URL, using="httpx")


def throttled(seconds: str, status: int = 429) -> httpx.Response:
    response = api_error(status, "unavailable", "too many requests")
    response.headers["Retry-After"] = seconds
    return response


@pytest.fixture
async def pauses() -> list[float]:
    return []


@pytest.fixture
async def connect(pauses: list[float]) -> AsyncIterator[Connect]:
    """Sources whose pauses between attempts are recorded instead of slept, on a fixed wall clock."""

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    async with AsyncExitStack() as clients:

        def connect(**config: object) -> PrometheusSource:
            cfg = PrometheusConfig(url=URL, backoff=0.2, **config)  # type: ignore[arg-type]
            client = cfg.client()
            clients.push_async_callback(client.aclose)
            return PrometheusSource(cfg, client, clock=lambda: NOW, sleep=sleep)

        yield connect


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("30", 30.0),
        (" 7 ", 7.0),
        ("Sun, 01 Mar 2026 12:00:45 GMT", 45.0),  # IMF-fixdate
        ("Sunday, 01-Mar-26 12:01:00 GMT", 60.0),  # RFC 850
        ("Sun Mar  1 12:00:10 2026", 10.0),  # asctime: no zone, GMT by definition
        ("Sun, 01 Mar 2026 11:00:00 GMT", 0.0),  # already past: call when you like
    ],
)
def test_retry_after_is_seconds_or_an_http_date(header: str, seconds: float) -> None:
    assert retry_after(header, NOW) == seconds


@pytest.mark.parametrize("header", [None, "", "soon", "-5", "1.5", "٣"])
def test_an_absent_or_unreadable_retry_after_asks_nothing(header: str | None) -> None:
    assert retry_after(header, NOW) is None


async def test_a_retry_is_never_sooner_than_retry_after(
    respx_mock: respx.MockRouter, connect: Connect, pauses: list[float]
) -> None:
    route = respx_mock.post("/api/v1/query").mock(side_effect=[throttled("3"), vector(({}, "1"))])
    samples = await Deadline(20, URL).bound(connect(retries=2)).query("up", NOW)
    assert [s.value for s in samples] == [1.0]
    assert route.call_count == 2
    assert pauses == [3.0]  # not the 0.2s backoff


async def test_a_short_retry_after_never_shortens_the_backoff(
    respx_mock: respx.MockRouter, connect: Connect, pauses: list[float]
) -> None:
    respx_mock.post("/api/v1/query").mock(side_effect=[throttled("0"), throttled("0"), vector(({}, "1"))])
    await connect(retries=2).query("up", NOW)
    assert pauses == [0.2, 0.4]


async def test_a_retry_after_beyond_the_deadline_fails_at_once_saying_when(
    respx_mock: respx.MockRouter, connect: Connect, pauses: list[float]
) -> None:
    route = respx_mock.post("/api/v1/query").mock(return_value=throttled("30"))
    with pytest.raises(SourceUnavailable) as raised:
        await Deadline(5, URL).bound(connect(retries=2)).query("up", NOW)
    assert route.call_count == 1  # asked once, not retried sooner than it asked
    assert pauses == []
    error = raised.value
    assert (error.retry_after, error.status) == (30.0, 429)
    assert "Prometheus asked to be called again in 30s (at 2026-03-01T12:00:30+00:00)" in error.detail
    assert "beyond the 5s this diagnosis can still wait" in error.detail


async def test_without_a_deadline_a_call_waits_no_longer_than_its_timeout(
    respx_mock: respx.MockRouter, connect: Connect, pauses: list[float]
) -> None:
    then = (NOW + timedelta(seconds=15)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    route = respx_mock.post("/api/v1/query").mock(return_value=throttled(then, status=503))
    with pytest.raises(SourceUnavailable) as raised:
        await connect(retries=2, timeout=10.0).query("up", NOW)
    assert route.call_count == 1
    assert raised.value.retry_after == 15.0
    assert "beyond the 10s this diagnosis can still wait" in raised.value.detail


async def test_a_429_without_retry_after_is_unavailable_after_its_retries(
    respx_mock: respx.MockRouter, connect: Connect, pauses: list[float]
) -> None:
    respx_mock.post("/api/v1/query").mock(return_value=api_error(429, "unavailable", "slow down"))
    with pytest.raises(SourceUnavailable) as raised:
        await connect(retries=1).query("up", NOW)
    assert (raised.value.status, raised.value.retry_after) == (429, None)
    assert pauses == [0.2]


async def test_a_5xx_error_carries_its_status(respx_mock: respx.MockRouter, connect: Connect) -> None:
    respx_mock.post("/api/v1/query").mock(return_value=httpx.Response(502, text="bad gateway"))
    with pytest.raises(SourceProtocolError) as raised:
        await connect(retries=0).query("up", NOW)
    assert raised.value.status == 502
