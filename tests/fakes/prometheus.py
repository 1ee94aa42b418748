"""Prometheus's HTTP API faked with respx, for faults and units.

respx (its `httpx` mocker) answers in front of the client's transport, not in place of the client:
the code under test keeps the client its own config builds (timeout, auth headers, retries), and
only what would go on the wire is replaced; a request passed through goes out on the client's own
transport (aiohttp's pool by default) to the real Prometheus. Requests to other URLs (the test's
own client to the daemon) are not touched. Tests of what PromQL means use a real Prometheus
(`start_prometheus`, `fleet_prometheus`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import respx

# A hook sees each request first: it answers it (a response), fails it (raises), or lets it reach
# the real Prometheus (None), possibly after holding it (an await).
Hook = Callable[[httpx.Request], Awaitable[httpx.Response | None]]


@asynccontextmanager
async def in_front_of(url: str, hook: Hook) -> AsyncIterator[respx.Route]:
    """While open, every request to `url` goes through `hook`: answered or failed there, or passed on
    to the Prometheus listening at `url`."""

    async def effect(request: httpx.Request) -> httpx.Response | httpx.Request:
        answered = await hook(request)
        return request if answered is None else answered  # respx passes a returned request through

    # Not assert_all_called: a request held by `hook` may be cancelled (its diagnosis superseded)
    # before respx records it.
    async with respx.mock(assert_all_called=False, using="httpx") as router:
        faked = router.route(url__startswith=url.rstrip("/") + "/").mock(side_effect=effect)
        # The `httpx` mocker sees every client: the test's own (to the daemon) goes its way untouched.
        router.route().pass_through()
        yield faked


def vector(*items: tuple[dict[str, str], str], warnings: list[str] | None = None) -> httpx.Response:
    """A successful instant query: one sample per (labels, value), values as Prometheus writes them."""
    result = [{"metric": labels, "value": [1.0, value]} for labels, value in items]
    return success({"resultType": "vector", "result": result}, warnings=warnings)


def success(data: Any, warnings: list[str] | None = None) -> httpx.Response:
    body: dict[str, Any] = {"status": "success", "data": data}
    if warnings is not None:
        body["warnings"] = warnings
    return httpx.Response(200, json=body)


def api_error(status: int, error_type: str, error: str) -> httpx.Response:
    """An error the way the API words it (`errorType`, `error`), with its HTTP status."""
    return httpx.Response(status, json={"status": "error", "errorType": error_type, "error": error})
