"""The Retry-After of a 503 is the real wait: until the circuit around Prometheus lets a call through
(never sooner than what Prometheus asked for), in whole seconds rounded up and at least 1; only when
nothing says how long is it the default. The circuit's clock is injected: waits are set, never slept."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from diagnosd.api.errors import DEFAULT_RETRY_AFTER
from diagnosd.promlocal import free_port
from tests.fakes.prometheus import Hook, api_error, in_front_of
from tests.serving import AT, build, serve, settings


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def throttling(retry_after: str) -> Hook:
    async def throttle(request: httpx.Request) -> httpx.Response:
        response = api_error(429, "unavailable", "too many requests")
        response.headers["Retry-After"] = retry_after
        return response

    return throttle


async def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


@asynccontextmanager
async def daemon(tmp_path: Path, hook: Hook, ticks: Ticks, **prometheus: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app before a Prometheus that `hook` answers (nothing listens at its port)."""
    url = f"http://127.0.0.1:{free_port()}"
    config = settings(url, tmp_path, prometheus={"url": url, **prometheus})
    async with in_front_of(url, hook), serve(build(config, timer=ticks, rand=lambda: 0.0)) as (client, _):
        yield client


async def diagnose(client: httpx.AsyncClient) -> httpx.Response:
    response = await client.get("/diagnose/queue_backlog", params={"at": AT.isoformat()})
    assert (response.status_code, response.json()["error"]) == (503, "prometheus_unavailable")
    return response


@pytest.mark.parametrize(
    ("elapsed", "header"),
    [
        (0.0, "30"),  # the answer that opened the circuit: Prometheus asked for 30 s
        (12.5, "18"),  # the circuit refuses: 17.5 s left, rounded up
        (29.6, "1"),  # 0.4 s left: never 0, which would ask for a retry at once
    ],
)
async def test_a_throttling_prometheus_sets_the_wait(tmp_path: Path, elapsed: float, header: str) -> None:
    ticks = Ticks()
    async with daemon(tmp_path, throttling("30"), ticks) as client:
        response = await diagnose(client)
        if elapsed:
            ticks.now += elapsed
            response = await diagnose(client)
    assert response.headers["retry-after"] == header


async def test_a_wait_beyond_the_longest_cool_down_is_the_cool_down(tmp_path: Path) -> None:
    """Prometheus asks for an hour; the circuit probes again after max_cooldown (5 min by default),
    so that is when a retry may be served."""
    async with daemon(tmp_path, throttling("3600"), Ticks()) as client:
        response = await diagnose(client)
    assert response.headers["retry-after"] == "300"


async def test_an_unreachable_prometheus_waits_for_the_circuit_it_opened(tmp_path: Path) -> None:
    """No Retry-After from a refused connection: the wait is the cool-down of the circuit the
    failure opened (one failure opens it here, 12 s)."""
    circuit = {"failures": 1, "cooldown": "12s"}
    async with daemon(tmp_path, refused, Ticks(), retries=0, circuit=circuit) as client:
        response = await diagnose(client)
    assert response.headers["retry-after"] == "12"


async def test_without_any_wait_known_the_default_is_sent(tmp_path: Path) -> None:
    """A refused connection with the circuit still closed: nothing says how long, so the default."""
    async with daemon(tmp_path, refused, Ticks(), retries=0, circuit={"failures": 1000}) as client:
        response = await diagnose(client)
    assert response.headers["retry-after"] == str(DEFAULT_RETRY_AFTER)
