"""One diagnosis's deadline over every call it makes: a hanging Prometheus costs the deadline, never
the per-query timeout times its retries times the number of batches.

`Deadline` is the policy (how long, against which backend); `bound` starts one diagnosis's clock
around its source. A call still unanswered at that instant, or made after it, raises SourceTimeout
with its query: the checks that needed it read unknown (timeout), the answers already in are kept.
It sits under the wrappers that account for errors (MeteredSource, triage's recorder), so a
diagnosis cut short counts as partial, never as complete. Below it, `time_left()` tells a source
how long the diagnosis it answers can still wait (PrometheusSource weighs a Retry-After by it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from diagnosd.errors import DeadlineExceeded
from diagnosd.sources.base import QuerySource, Sample, declared_types

T = TypeVar("T")

# The event-loop instant by which the diagnosis being answered must be done; unset outside one.
# A context variable, since the QuerySource seam carries no deadline: it reaches the tasks the
# wrappers below start for this call (a round's memo) and no other diagnosis's.
_ANSWER_BY: ContextVar[float | None] = ContextVar("diagnosd_answer_by", default=None)


def time_left() -> float | None:
    """Seconds until the deadline of the diagnosis this call serves; None when it has none."""
    when = _ANSWER_BY.get()
    return None if when is None else when - asyncio.get_running_loop().time()


@dataclass(frozen=True)
class Deadline:
    seconds: float
    # The backend's URL, which the timeout names like any other source error.
    url: str

    def bound(self, source: QuerySource) -> DeadlineSource:
        """`source` with this deadline, counted from now."""
        return DeadlineSource(source, self)


class DeadlineSource:
    def __init__(self, inner: QuerySource, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline
        self._when = asyncio.get_running_loop().time() + deadline.seconds

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        return await self._within(self._inner.query(promql, at), promql)

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        return await self._within(self._inner.metric_names(candidates, start, end, where), None)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        return await self._within(declared_types(self._inner, names), None)

    async def _within(self, call: Awaitable[T], promql: str | None) -> T:
        if asyncio.get_running_loop().time() >= self._when:
            # Queued behind the concurrency limit until the deadline passed: not sent at all.
            if asyncio.iscoroutine(call):
                call.close()
            raise self._expired(promql)
        scope = asyncio.timeout_at(self._when)
        outer = _ANSWER_BY.get()
        token = _ANSWER_BY.set(self._when if outer is None else min(outer, self._when))
        try:
            async with scope:
                return await call
        except TimeoutError:
            if scope.expired():
                raise self._expired(promql) from None
            raise
        finally:
            _ANSWER_BY.reset(token)

    def _expired(self, promql: str | None) -> DeadlineExceeded:
        what = "" if promql else " (metric name discovery)"
        return DeadlineExceeded(
            f"no answer within the diagnosis deadline of {self._deadline.seconds:g}s{what}",
            url=self._deadline.url,
            query=promql,
        )
