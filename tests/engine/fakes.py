"""A QuerySource fake for engine units: answers by metric name and time, records every call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from diagnosd.errors import SourceError
from diagnosd.sources.base import Sample

Answer = list[Sample] | SourceError


@dataclass
class FakeSource:
    # metric name (as it appears in the rewritten query) -> answer, or time -> answer
    answers: dict[str, Answer | Callable[[datetime], Answer]] = field(default_factory=dict)
    present: set[str] | None = None
    queries: list[tuple[str, datetime]] = field(default_factory=list)

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.queries.append((promql, at))
        for name, answer in self.answers.items():
            if name in promql:
                value = answer(at) if callable(answer) else answer
                if isinstance(value, SourceError):
                    raise value
                return value
        return []

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        present = self.present if self.present is not None else set(self.answers)
        return set(candidates) & present


def samples(values: dict[str, float], label: str = "pod", **common: str) -> list[Sample]:
    return [Sample({"namespace": "prod", label: key, **common}, value) for key, value in values.items()]


class Turns:
    """Counts the event loop's turns while it is entered: a task that adds one at every turn, to
    tell whether a long piece of work let the loop run in between."""

    def __init__(self) -> None:
        self.count = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Turns:
        self._task = asyncio.ensure_future(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _tick(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)
