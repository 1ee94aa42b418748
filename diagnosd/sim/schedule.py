"""When the simulator ticks: dense where diagnoses look, coarse elsewhere, every second once live.

Where diagnoses look is data, `looks`: (offset, window) pairs, each the `window` seconds ending
`offset` seconds before the anchor, ticked every `step`; the rest of the history every `coarse`.
The drills derive them from the trees they run (diagnosd/drills/windows.py); the default, `LOOKS`,
serves the shipped trees' comparisons of now with the same time yesterday over windows of up to
an hour: the last 95 minutes and the 85 around `anchor - 1d`. Before `anchor - far` (where only long
windows read: a max over a week) the ticks are `far_step` apart. After the anchor the clock ticks
every `live_step`. The schedule depends only on its parameters, so history and live agree
wherever they meet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DAY = 86400.0
LOOKS = ((0.0, 95 * 60.0), (DAY - 300.0, 85 * 60.0))


@dataclass(frozen=True)
class Schedule:
    origin: float
    anchor: float
    step: float = 60.0
    coarse: float = 900.0
    live_step: float = 1.0
    looks: tuple[tuple[float, float], ...] = LOOKS
    far: float = math.inf  # seconds before the anchor; infinite: coarse ticks back to the origin
    far_step: float = 3600.0

    @property
    def dense(self) -> tuple[tuple[float, float], ...]:
        """The looks as (start, end) times."""
        return tuple((self.anchor - offset - window, self.anchor - offset) for offset, window in self.looks)

    def next(self, after: float) -> float:
        """The first tick strictly after `after`."""
        if after >= self.anchor:
            return self.anchor + (math.floor((after - self.anchor) / self.live_step + 1e-9) + 1) * self.live_step
        fine = self._aligned(after, self.step)
        dense = self.dense
        if self.coarse <= self.step or any(start <= fine <= end for start, end in dense):
            return min(fine, self.anchor)
        starts = [self._aligned(start - self.step, self.step) for start, _ in dense if start > after]
        near = self.anchor - self.far
        coarse = self._aligned(after, self.far_step) if after < near else self._aligned(after, self.coarse)
        return min([coarse, *starts, *([near] if after < near else []), self.anchor])

    def _aligned(self, after: float, step: float) -> float:
        return self.origin + (math.floor((after - self.origin) / step + 1e-9) + 1) * step
