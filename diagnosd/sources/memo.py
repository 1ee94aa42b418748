"""A QuerySource wrapper that asks each identical question once while it lives: one scheduler round.

Trees share queries (the request-rate detect of several symptoms, the same saturation check
under two trees): within a round they are asked at the same moment, so the answer is the same.
Askers of a question already in flight await that one request; an answer is kept for later
askers of the round; a failure is handed to the askers that were waiting for it and then
forgotten, so the next asker tries again (a blip never becomes an answer). Make a new one per
round: nothing here expires.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Hashable, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

from diagnosd.sources.base import QuerySource, Sample, Samples, declared_types, warnings_of

T = TypeVar("T")


class MemoSource:
    def __init__(self, inner: QuerySource) -> None:
        self._inner = inner
        self._asked: dict[Hashable, asyncio.Future[Any]] = {}
        self.asked = 0  # questions put to this source
        self.sent = 0  # of which went to the inner source

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        found = await self._once(("query", promql, at), lambda: self._inner.query(promql, at))
        # A copy: an asker that edits its answer must not edit another tree's.
        return Samples(found, warnings_of(found)) if isinstance(found, Samples) else list(found)

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        key = ("metric_names", frozenset(candidates), start, end, tuple(where))
        return set(await self._once(key, lambda: self._inner.metric_names(candidates, start, end, where)))

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        found = await self._once(("metadata", frozenset(names)), lambda: declared_types(self._inner, names))
        return dict(found) if found is not None else None

    async def _once(self, key: Hashable, ask: Callable[[], Awaitable[T]]) -> T:
        self.asked += 1
        task = self._asked.get(key)
        if task is None:
            self.sent += 1
            task = self._asked[key] = asyncio.ensure_future(ask())
            task.add_done_callback(lambda done: self._settled(key, done))
        # Shielded: one asker giving up (its diagnosis cancelled) must not cancel the others' request.
        return cast(T, await asyncio.shield(task))

    def _settled(self, key: Hashable, task: asyncio.Future[Any]) -> None:
        # Retrieving the exception also keeps asyncio from logging it as never retrieved.
        failed = task.cancelled() or task.exception() is not None
        if failed and self._asked.get(key) is task:
            del self._asked[key]
