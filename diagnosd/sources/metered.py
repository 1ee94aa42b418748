"""A QuerySource wrapper that times every call, reports it, and keeps the errors of one diagnosis.

One is made per diagnosis around the shared source: its errors tell whether that diagnosis could
look at everything (a target missing from a complete answer is gone; from a failed one, unknown).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from diagnosd.errors import SourceError
from diagnosd.sources.base import QuerySource, Sample, declared_types

Report = Callable[[str, float, SourceError | None], None]


class MeteredSource:
    def __init__(self, inner: QuerySource, report: Report | None = None) -> None:
        self._inner = inner
        self._report = report or (lambda endpoint, seconds, error: None)
        self.calls = 0
        self.errors: list[SourceError] = []

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        start = time.perf_counter()
        try:
            samples = await self._inner.query(promql, at)
        except SourceError as error:
            self._done("query", start, error)
            raise
        self._done("query", start, None)
        return samples

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        began = time.perf_counter()
        try:
            names = await self._inner.metric_names(candidates, start, end, where)
        except SourceError as error:
            self._done("metric_names", began, error)
            raise
        self._done("metric_names", began, None)
        return names

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        """Forwarded (None where the inner source has none or it failed). A failure is not kept in
        `errors`: without metadata a name without series is only "absent", as before."""
        began = time.perf_counter()
        found = await declared_types(self._inner, names)
        self.calls += 1
        self._report("metadata", time.perf_counter() - began, None)
        return found

    def _done(self, endpoint: str, start: float, error: SourceError | None) -> None:
        self.calls += 1
        if error is not None:
            self.errors.append(error)
        self._report(endpoint, time.perf_counter() - start, error)
