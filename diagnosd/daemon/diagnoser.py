"""Runs one diagnosis for any driver (REST, alert worker, scheduler round), metered and honest.

A diagnosis that saw no target because its queries failed did not look: it raises the source's
error instead of returning an empty (healthy-looking) answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from diagnosd.engine import Looking, Scope
from diagnosd.engine.narrowed import diagnose_narrowed
from diagnosd.engine.triage import triage
from diagnosd.errors import SourceError, SourceTimeout, SourceUnavailable, UnknownSymptom
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import Diagnosis
from diagnosd.findings.triage import Board
from diagnosd.moments import Clock, utc_now
from diagnosd.sources.base import QuerySource
from diagnosd.sources.deadline import Deadline
from diagnosd.sources.metered import MeteredSource
from diagnosd.topology import DEFAULT as DEFAULT_TOPOLOGY
from diagnosd.topology import Topology
from diagnosd.trees import RuleSet, Tree


class Outcome(StrEnum):
    """How a diagnosis (or a round of them) went: the `outcome` label of the self-metrics."""

    OK = "ok"  # every query answered
    PARTIAL = "partial"  # some queries failed: those checks are unknown
    ERROR = "error"  # nothing could be looked at


class Observer(Protocol):
    """What a Diagnoser reports as it works: the daemon's self-metrics (sinks/metrics.Metrics), or
    a tally an alert batch's diagnosis process sends back to them (alertmanager/offload.py)."""

    def trees_loaded(self, symptoms: Iterable[str]) -> None: ...

    def query(self, endpoint: str, seconds: float, error: SourceError | None) -> None: ...

    def diagnosed(
        self,
        symptom: str,
        trigger: str,
        outcome: str,
        seconds: float,
        errors: Sequence[SourceError],
        succeeded_at: datetime | None,
    ) -> None: ...


@dataclass(frozen=True)
class Looked:
    diagnosis: Diagnosis
    # Query errors met on the way (those checks are unknown); empty when everything answered.
    errors: tuple[SourceError, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.errors

    @property
    def outcome(self) -> Outcome:
        return Outcome.OK if self.complete else Outcome.PARTIAL


class Diagnoser:
    def __init__(
        self,
        source: QuerySource,
        ruleset: RuleSet,
        metrics: Observer | None = None,
        *,
        strict_labels: Sequence[str] = (),
        params: Mapping[str, Mapping[str, float | str]] | None = None,
        topology: Topology = DEFAULT_TOPOLOGY,
        clock: Clock = utc_now,
        deadline: Deadline | None = None,
    ) -> None:
        self._source = source
        # Each diagnosis (and each triage) answers within it; what did not answer in time reads unknown.
        self._deadline = deadline
        self.ruleset = ruleset
        self._metrics = metrics
        if metrics is not None:
            metrics.trees_loaded(ruleset.trees)
        self._params = params or {}
        self._clock = clock
        self.looking = Looking(ruleset.aliases, frozenset(strict_labels), topology, clock)

    @property
    def source(self) -> QuerySource:
        """The source every diagnosis reads (unmetered), for a driver's own side questions."""
        return self._source

    def tree(self, symptom: str) -> Tree:
        tree = self.ruleset.tree(symptom)
        if tree is None:
            raise UnknownSymptom(symptom, list(self.ruleset.trees))
        return tree

    async def diagnose(
        self,
        tree: Tree,
        scope: Scope,
        at: datetime | None,
        trigger: Trigger,
        overrides: Mapping[str, float | str] | None = None,
        source: QuerySource | None = None,
        *,
        narrowed: bool = False,
    ) -> Looked:
        """`overrides`: this call's tree params, over the configured ones. `source`: read there
        instead of the shared source (a round's memo around it), metered the same. `narrowed`:
        walk the tree only where the symptom is not clear (engine/narrowed.py), as rounds do."""
        source = MeteredSource(self._bounded(source or self._source), self._metrics.query if self._metrics else None)
        evaluator = self.looking.evaluator(source)
        start = time.perf_counter()
        outcome = Outcome.ERROR
        try:
            params = {**self._params.get(tree.id, {}), **(overrides or {})}
            if narrowed:
                diagnosis = await diagnose_narrowed(evaluator, tree, scope, at, params)
            else:
                diagnosis = await evaluator.diagnose(tree, scope, at, params)
            if source.errors and not diagnosis.targets:
                raise blindness(source.errors)
            looked = Looked(diagnosis, tuple(source.errors))
            outcome = looked.outcome
            return looked
        finally:
            if self._metrics is not None:
                # Only a complete diagnosis is a success: a partial one, or one that raised for
                # another reason than a query error (a bug, a cancellation), leaves it as it was.
                succeeded = self._clock() if outcome is Outcome.OK else None
                seconds = time.perf_counter() - start
                self._metrics.diagnosed(tree.id, str(trigger), outcome, seconds, source.errors, succeeded)

    async def triage(self, scope: Scope, at: datetime | None, history_start: datetime | None = None) -> Board:
        """Every symptom at once, worst first (engine/triage.py); raises when nothing could be seen."""
        source = MeteredSource(self._bounded(self._source), self._metrics.query if self._metrics else None)
        return await triage(
            source,
            self.ruleset.trees.values(),
            scope,
            at,
            looking=replace(self.looking, history_start=history_start),
            params=self._params,
        )

    def _bounded(self, source: QuerySource) -> QuerySource:
        # Under the meter: a query cut off by the deadline is one of this diagnosis's errors.
        return self._deadline.bound(source) if self._deadline is not None else source


def blindness(errors: Sequence[SourceError]) -> SourceError:
    """The error that best says why nothing could be seen: unreachable, then timeout, then the first."""
    for kind in (SourceUnavailable, SourceTimeout):
        for error in errors:
            if isinstance(error, kind):
                return error
    return errors[0]
