"""When the simulator ticks: dense where diagnoses look, coarse elsewhere, every second once live.

The trees compare now with the same time yesterday over windows of up to an hour, so the last
95 minutes and the 85 around `anchor - 1d` tick every `step`; the rest of the history every
`coarse`. After the anchor the clock ticks every `live_step`. The schedule depends only on its
parameters, so history and live agree wherever they meet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DAY = 86400.0


@dataclass(frozen=True)
class Schedule:
    origin: float
    anchor: float
    step: float = 60.0
    coarse: float = 900.0
    live_step: float = 1.0

    @property
    def dense(self) -> tuple[tuple[float, float], ...]:
        a = self.anchor
        return ((a - DAY - 80 * 60.0, a - DAY + 300.0), (a - 95 * 60.0, a))

    def next(self, after: float) -> float:
        """The first tick strictly after `after`."""
        if after >= self.anchor:
            return self.anchor + (math.floor((after - self.anchor) / self.live_step + 1e-9) + 1) * self.live_step
        fine = self._aligned(after, self.step)
        if self.coarse <= self.step or any(start <= fine <= end for start, end in self.dense):
            return min(fine, self.anchor)
        starts = [self._aligned(start - self.step, self.step) for start, _ in self.dense if start > after]
        return min([self._aligned(after, self.coarse), *starts, self.anchor])

    def _aligned(self, after: float, step: float) -> float:
        return self.origin + (math.floor((after - self.origin) / step + 1e-9) + 1) * step
