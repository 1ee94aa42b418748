"""The one OpenMetrics writer: series with timestamps, for `promtool tsdb create-blocks-from openmetrics`.

Series tests, the simulator's history, the drills and the benchmarks all backfill through here.
No `# TYPE` lines: promtool accepts untyped samples, and backfilled series keep no metadata anyway.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TextIO

# Labels as the simulator keeps them: (name, value) pairs in exposition order, hashable.
Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Series:
    name: str
    # A mapping is written sorted by label name; pairs are written in their own order.
    labels: Mapping[str, str] | Pairs
    # (unix seconds, value), strictly increasing in time: promtool drops the rest silently.
    points: Iterable[tuple[float, float]]


def write(out: TextIO, series: Iterable[Series], *, end: bool = True) -> int:
    """Write every series, grouped by metric name as OpenMetrics requires; returns samples written.

    `end=False` leaves out `# EOF`, for a caller that appends more series to the same file.
    """
    by_name: dict[str, list[Series]] = {}
    for one in series:
        by_name.setdefault(one.name, []).append(one)
    written = 0
    # A day of history repeats the same few thousand timestamps over every series: format each once.
    stamps: dict[float, str] = {}
    for name in sorted(by_name):
        for one in by_name[name]:
            labels = one.labels
            head = name + (_pairs(labels) if isinstance(labels, tuple) else _mapping(labels)) + " "
            lines = []
            for t, v in one.points:
                stamp = stamps.get(t)
                if stamp is None:
                    stamp = stamps[t] = f" {t:.3f}\n"
                lines.append(head + value(v) + stamp)
            out.write("".join(lines))
            written += len(lines)
    if end:
        out.write("# EOF\n")
    return written


def value(number: float) -> str:
    """repr() is exact and promtool reads it; only non-finite values need OpenMetrics spelling."""
    if math.isfinite(number):
        return repr(float(number))
    if number != number:
        return "NaN"
    return "+Inf" if number > 0 else "-Inf"


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _mapping(labels: Mapping[str, str]) -> str:
    return _pairs(tuple(sorted(labels.items())))


@lru_cache(maxsize=262144)
def _pairs(labels: Pairs) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels) + "}"
