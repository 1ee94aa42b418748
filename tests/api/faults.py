"""Fault injection for the API tests: a Prometheus source over httpx.MockTransport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx

from diagnosd.sources import PrometheusConfig, PrometheusSource, QuerySource

Handler = Callable[[httpx.Request], Coroutine[None, None, httpx.Response]]
URL = "http://prometheus.invalid:9090"


def mock_source(handler: Handler, url: str = URL) -> Callable[[], AbstractAsyncContextManager[QuerySource]]:
    config = PrometheusConfig(url=url, timeout=2.0, retries=0)

    @asynccontextmanager
    async def open_source() -> AsyncIterator[QuerySource]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url=url) as client:
            yield PrometheusSource(config, client)

    return open_source


Hook = Callable[[httpx.Request], Awaitable[httpx.Response | None]]


def forwarding(url: str, hook: Hook | None = None) -> Handler:
    """Sends each request on to a real Prometheus at `url`, unless `hook` answers it first."""

    async def handle(request: httpx.Request) -> httpx.Response:
        if hook is not None:
            answered = await hook(request)
            if answered is not None:
                return answered
        headers = {"content-type": request.headers.get("content-type", "")}
        async with httpx.AsyncClient(base_url=url) as upstream:
            answer = await upstream.request(
                request.method, request.url.path, params=request.url.params, content=request.content, headers=headers
            )
        return httpx.Response(answer.status_code, content=answer.content, headers={"content-type": "application/json"})

    return handle
