"""The seam between the engine and any PromQL backend: samples in, nothing else."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector (a scalar result is one sample with no labels)."""

    labels: Mapping[str, str]
    value: float


class QuerySource(Protocol):
    """What the engine needs from Prometheus, Thanos, Mimir or VictoriaMetrics."""

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        """Evaluate an instant query at `at`. Raises diagnosd.errors.SourceError."""
        ...

    async def metric_names(self, candidates: Collection[str], start: datetime, end: datetime) -> set[str]:
        """Which of `candidates` have series between `start` and `end`. Raises SourceError."""
        ...
