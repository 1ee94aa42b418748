"""What the benchmarks share: a query counter around the composition root's source, and a recorder
that replays a diagnosis' requests."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from datetime import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry

from diagnosd.daemon import compose
from diagnosd.daemon.settings import Settings
from diagnosd.errors import SourceError
from diagnosd.sources.base import QuerySource, Sample
from diagnosd.sources.metered import MeteredSource


def settings(url: str, store: Path) -> Settings:
    """The daemon's settings a fleet is measured with: that Prometheus (no retry, a long timeout
    and diagnosis deadline: a slow answer is measured, not cut), a store of its own, no rounds of
    its own, findings at once."""
    return Settings.model_validate(
        {
            "prometheus": {"url": url, "timeout": "120s", "diagnosis_deadline": "600s", "retries": 0},
            "store": {"path": str(store)},
            "scheduler": {"enabled": False},
            "findings": {"for": "0s"},
        }
    )


def counted_runtime(
    url: str, store: Path, counter: QueryCounter, at: datetime, registry: CollectorRegistry
) -> compose.Runtime:
    """The daemon's composition for a fleet measured at `at`, its source under `counter`."""
    measured = settings(url, store)

    @contextlib.asynccontextmanager
    async def counted() -> AsyncIterator[QuerySource]:
        async with compose.prometheus_source(measured.prometheus.config()) as source:
            yield counter.wrap(source)

    return compose.build(measured, registry=registry, clock=lambda: at, source=counted)


class QueryCounter:
    """Counts the PromQL queries (`/api/v1/query`) a diagnosis sends; `wrap` for compose.diagnoser."""

    def __init__(self) -> None:
        self.queries = 0

    def wrap(self, source: QuerySource) -> QuerySource:
        return MeteredSource(source, self._report)

    def _report(self, endpoint: str, seconds: float, error: SourceError | None) -> None:
        if endpoint == "query":
            self.queries += 1


Replay = Callable[[], Awaitable[float]]


class Recorder:
    """Passes every request through and keeps it, to send it again (`replays`: each times itself)."""

    def __init__(self, inner: QuerySource) -> None:
        self._inner = inner
        self._calls: list[Callable[[], Awaitable[object]]] = []

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self._calls.append(lambda: self._inner.query(promql, at))
        return await self._inner.query(promql, at)

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        self._calls.append(lambda: self._inner.metric_names(candidates, start, end, where))
        return await self._inner.metric_names(candidates, start, end, where)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        self._calls.append(lambda: self._inner.metadata(names))
        return await self._inner.metadata(names)

    def replays(self) -> list[Replay]:
        def timed(call: Callable[[], Awaitable[object]]) -> Replay:
            async def again() -> float:
                start = time.perf_counter()
                with contextlib.suppress(SourceError):  # a request that fails again took its time too
                    await call()
                return time.perf_counter() - start

            return again

        return [timed(call) for call in self._calls]
