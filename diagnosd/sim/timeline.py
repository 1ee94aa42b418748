"""A scenario's faults on the clock: which are active at a time, and the knobs they produce.

Fault offsets are resolved against the anchor once; numeric changes may ramp in linearly.
Effective knobs are cached per combination of active faults, so a day of ticks builds few objects.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from diagnosd.sim.scenario import Fault, Replace, Restart, seconds
from diagnosd.trees.model import Strict

K = TypeVar("K", bound=Strict)


@dataclass(frozen=True)
class Change:
    index: int
    fault: Fault
    start: float
    end: float
    ramp: float

    def strength(self, t: float) -> float:
        if t < self.start or t >= self.end:
            return 0.0
        if self.ramp <= 0.0:
            return 1.0
        return min(1.0, (t - self.start) / self.ramp)


class Timeline:
    def __init__(self, faults: list[Fault], anchor: float) -> None:
        self.changes = [
            Change(
                index=i,
                fault=f,
                start=anchor + seconds(f.start),
                end=anchor + seconds(f.end) if f.end else math.inf,
                ramp=seconds(f.ramp) if f.ramp else 0.0,
            )
            for i, f in enumerate(faults)
        ]
        self._cache: dict[tuple[str, int, tuple[tuple[int, float], ...]], Any] = {}

    def knobs(self, target: str, base: K, t: float) -> K:
        """`base` with every fault on `target` active at `t` applied, in file order."""
        active = tuple(
            (c.index, round(s, 3))
            for c in self.changes
            if c.fault.target == target and (c.fault.set or c.fault.scale) and (s := c.strength(t)) > 0.0
        )
        if not active:
            return base
        key = (target, id(base), active)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = _apply(base, [(self.changes[i].fault, s) for i, s in active])
        result: K = found
        return result

    def restarts(self, target: str, after: float, until: float) -> Iterator[tuple[float, Restart]]:
        """Container deaths of pod `target` in (after, until]."""
        for change in self.changes:
            restart = change.fault.restart
            if change.fault.target != target or restart is None:
                continue
            every = seconds(restart.every) if restart.every else 0.0
            when = change.start
            if every > 0.0 and when <= after:
                when += math.ceil((after - when) / every + 1e-9) * every
            while after < when <= until and when < change.end:
                yield when, restart
                if every <= 0.0:
                    break
                when += every

    def replacements(self, target: str, after: float, until: float) -> Iterator[tuple[float, Replace]]:
        """Pod `target` deleted and replaced in (after, until]."""
        for change in self.changes:
            replace = change.fault.replace
            if change.fault.target == target and replace is not None and after < change.start <= until:
                yield change.start, replace


def _apply(base: K, faults: list[tuple[Fault, float]]) -> K:
    values = base.model_dump()
    for fault, strength in faults:
        for name, value in fault.set.items():
            old = values[name]
            numeric = isinstance(value, int | float) and not isinstance(value, bool) and isinstance(old, int | float)
            values[name] = old + (value - old) * strength if numeric and old is not None else value
        for name, factor in fault.scale.items():
            values[name] = values[name] * (1.0 + (factor - 1.0) * strength)
    for name, field in type(base).model_fields.items():
        # Optional limits too (`max_num_seqs: None` is the engine's own choice): a ramp between
        # two set values passes through floats.
        integral = field.annotation is int or "Annotated[int" in str(field.annotation)
        if integral and isinstance(values[name], float):
            values[name] = round(values[name])
    return type(base).model_validate(values)
