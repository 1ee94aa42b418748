"""The seam between the engine and any PromQL backend: samples in, nothing else."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from diagnosd.errors import SourceError


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector (a scalar result is one sample with no labels)."""

    labels: Mapping[str, str]
    value: float


class Samples(list[Sample]):
    """An instant vector with the warnings the backend sent beside it.

    Prometheus, Thanos Querier and Mimir answer `"status": "success"` with `warnings` when the
    answer is partial (a store or an ingester did not respond): the samples are then a lower
    bound of the truth, never the whole of it. A plain list means no warnings.
    """

    warnings: tuple[str, ...]

    def __init__(self, samples: Iterable[Sample] = (), warnings: Iterable[str] = ()) -> None:
        super().__init__(samples)
        self.warnings = tuple(warnings)


def warnings_of(samples: list[Sample]) -> tuple[str, ...]:
    """The warnings a query answer came with (none for a plain list)."""
    return samples.warnings if isinstance(samples, Samples) else ()


class QuerySource(Protocol):
    """What the engine needs from Prometheus, Thanos, Mimir or VictoriaMetrics."""

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        """Evaluate an instant query at `at`; a partial answer is `Samples` with its warnings.

        Raises diagnosd.errors.SourceError."""
        ...

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        """Which of `candidates` have series between `start` and `end`, among the series that also
        match every one of `where` (PromQL label matchers, e.g. `cluster="eu-1"`). Raises SourceError."""
        ...

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        """The metric type (counter, gauge, histogram...) the backend's metadata declares for each
        of `names` that it knows, or None when the backend has no metadata to ask.

        Prometheus keeps the `# TYPE` of every family its active targets expose, samples or not:
        a counter a target declares before its first event is known here. Raises SourceError."""
        ...


async def declared_types(source: QuerySource, names: Collection[str]) -> dict[str, str] | None:
    """`source.metadata(names)`, or None (unknown) when the source lacks it or cannot answer.

    Metadata only refines "absent": a backend without it (an older fake, a proxy that refuses the
    endpoint) leaves names that have no series absent, as before.
    """
    method = getattr(source, "metadata", None)
    if method is None or not names:
        return None if method is None else {}
    try:
        found = await method(names)
    except SourceError:
        return None
    return dict(found) if found is not None else None
