"""Where a push sink's work waits: a bounded queue holding the newest word about each finding, the
task that drains it with backoff while the receiver is down, the HTTP call both sinks make, and
their running part (the client and the tasks, started and always stopped together).

Diagnosis never waits here: putting is synchronous and never blocks; a full queue lets go of its
oldest finding and counts it. A finding put again replaces what was waiting for it (a resolution
replaces the firing it follows), so a long outage costs one entry per finding, not one per round.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

import httpx

from diagnosd.errors import SinkError

log = logging.getLogger(__name__)

T = TypeVar("T")
Count = Callable[[str, int], None]  # (outcome, how many)


class Outbox(Generic[T]):
    def __init__(self, capacity: int, count: Count) -> None:
        self._items: OrderedDict[str, T] = OrderedDict()
        self._capacity = capacity
        self._count = count
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: str, item: T) -> None:
        self._items.pop(key, None)
        self._items[key] = item
        self._trim()
        self._ready.set()

    def take(self, limit: int) -> list[tuple[str, T]]:
        taken: list[tuple[str, T]] = []
        while self._items and len(taken) < limit:
            taken.append(self._items.popitem(last=False))
        if not self._items:
            self._ready.clear()
        return taken

    def restore(self, items: list[tuple[str, T]]) -> None:
        """Failed items go back in front, except where something newer was put meanwhile."""
        for key, item in reversed(items):
            if key not in self._items:
                self._items[key] = item
                self._items.move_to_end(key, last=False)
        self._trim()
        if self._items:
            self._ready.set()

    async def wait(self) -> None:
        await self._ready.wait()

    def _trim(self) -> None:
        over = len(self._items) - self._capacity
        for _ in range(max(over, 0)):
            key, _ = self._items.popitem(last=False)
            log.warning("sink queue full (%d): dropped the oldest update, of finding %s", self._capacity, key)
        if over > 0:
            self._count("dropped", over)


class Backoff:
    """Seconds to wait after each failure in a row: first, doubled each time, never above cap."""

    def __init__(self, first: float, cap: float) -> None:
        self._first = first
        self._cap = max(cap, first)
        self._next = first

    def next(self) -> float:
        wait = self._next
        self._next = min(self._next * 2, self._cap)
        return wait

    def reset(self) -> None:
        self._next = self._first


Send = Callable[[list[tuple[str, T]]], Awaitable[None]]


async def pump(outbox: Outbox[T], send: Send[T], backoff: Backoff, count: Count, batch: int) -> None:
    """Drain `outbox` through `send` until cancelled: refused items are dropped, failed ones retried."""
    while True:
        await outbox.wait()
        items = outbox.take(batch)
        outcome = await _attempt(send, items)
        count(outcome, 1)
        if outcome == "failed":
            outbox.restore(items)
            await asyncio.sleep(backoff.next())
        else:
            backoff.reset()  # a refusal is an answer too: the receiver is up


async def _attempt(send: Send[T], items: list[tuple[str, T]]) -> str:
    try:
        await send(items)
    except SinkError as error:
        if error.retry:
            log.warning("%s; trying again", error)
            return "failed"
        log.error("%s; dropped %d update(s)", error, len(items))
        return "rejected"
    except Exception:  # a sink's bug must not end its task: these updates go, the next are tried
        log.exception("could not post %d update(s); dropped", len(items))
        return "rejected"
    return "sent"


async def request(
    client: httpx.AsyncClient, sink: str, method: str, url: str, body: Any, params: Any = None
) -> httpx.Response:
    """One call; raises SinkError, retryable unless the receiver refused the request itself."""
    try:
        response = await client.request(method, url, json=body, params=params)
    except httpx.TimeoutException as error:
        raise SinkError(sink, url, f"no answer in time ({type(error).__name__})") from error
    except httpx.HTTPError as error:
        raise SinkError(sink, url, f"cannot reach it ({type(error).__name__}: {error})") from error
    if response.is_success:
        return response
    status = response.status_code
    retry = status >= 500 or status in (408, 429)
    raise SinkError(sink, url, f"answered {status}: {response.text[:200]}", status=status, retry=retry)


class Running:
    """A push sink between start and stop: its one HTTP client and the tasks that use it."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def open(self, timeout: float, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(timeout=timeout, headers=headers)

    @property
    def client(self) -> httpx.AsyncClient:
        assert self._client is not None, "a sink sends only between start and stop"
        return self._client

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._tasks.append(asyncio.create_task(work))

    async def close(self) -> None:
        """Cancel and await the tasks (shutdown is not an error), then close the client they used."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
