"""What the benchmarks share: a query counter around the composition root's source."""

from __future__ import annotations

from diagnosd.errors import SourceError
from diagnosd.sources.base import QuerySource
from diagnosd.sources.metered import MeteredSource


class QueryCounter:
    """Counts the PromQL queries (`/api/v1/query`) a diagnosis sends; `wrap` for compose.diagnoser."""

    def __init__(self) -> None:
        self.queries = 0

    def wrap(self, source: QuerySource) -> QuerySource:
        return MeteredSource(source, self._report)

    def _report(self, endpoint: str, seconds: float, error: SourceError | None) -> None:
        if endpoint == "query":
            self.queries += 1
