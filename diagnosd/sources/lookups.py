"""A QuerySource wrapper that keeps the answers about what exists for a short while.

Before its first query, every diagnosis asks which metric names have series (one request) and,
for the names that have none, what the targets declare (one metadata request per name). These
answers describe the fleet's exporters, which change when a deployment does, not from one
diagnosis to the next; yet they run before any query can be sent, so a diagnosis waits for them
in full. Kept for `ttl`, a round of twenty trees (and every alert of a storm) asks them once.

- Names: one answer per (candidates, scope, window length), reused while its window's end is
  within `ttl` of the one asked (a diagnosis "now" asks a window that has moved by the seconds
  since). A name whose exporter appeared within the last `ttl` may read absent meanwhile: its
  checks are unknown, never judged on missing data.
- Declared types: per name, kept `ttl` from when they were asked.
- Failures are never kept: the next asker tries again. Queries pass through untouched.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from diagnosd.sources.base import QuerySource, Sample, declared_types

# Enough for every tree's discovery at a few windows; the oldest answers go first.
MAX_NAME_ANSWERS = 256


@dataclass(frozen=True)
class _Names:
    end: datetime
    present: frozenset[str]
    asked_at: float


class LookupCache:
    def __init__(self, inner: QuerySource, ttl: timedelta, clock: Callable[[], float] = time.monotonic) -> None:
        self._inner = inner
        self._ttl = ttl.total_seconds()
        self._clock = clock
        self._names: dict[tuple[frozenset[str], tuple[str, ...], timedelta], _Names] = {}
        self._types: dict[str, tuple[str | None, float]] = {}

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        return await self._inner.query(promql, at)

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        key = (frozenset(candidates), tuple(where), end - start)
        now = self._clock()
        kept = self._names.get(key)
        if kept is not None and self._fresh(kept.asked_at, now) and abs((end - kept.end).total_seconds()) <= self._ttl:
            return set(kept.present)
        present = await self._inner.metric_names(candidates, start, end, where)
        self._names.pop(key, None)
        self._names[key] = _Names(end, frozenset(present), now)
        while len(self._names) > MAX_NAME_ANSWERS:
            del self._names[next(iter(self._names))]
        return set(present)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        now = self._clock()
        stale = sorted(n for n in set(names) if not self._fresh(self._types.get(n, (None, -float("inf")))[1], now))
        if stale:
            found = await declared_types(self._inner, stale)
            if found is None:
                # No metadata to ask (or it failed): nothing kept, the same answer as the inner source's.
                return None
            self._types.update((n, (found.get(n), now)) for n in stale)
        return {n: kind for n in set(names) if (kind := self._types[n][0]) is not None}

    def _fresh(self, asked_at: float, now: float) -> bool:
        return now - asked_at < self._ttl
