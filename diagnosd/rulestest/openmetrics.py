"""Writes series as OpenMetrics text with timestamps, for `promtool tsdb create-blocks-from openmetrics`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class Series:
    name: str
    labels: Mapping[str, str]
    # (unix seconds, value), strictly increasing in time: promtool drops the rest silently.
    points: list[tuple[float, float]]


def write(out: TextIO, series: Iterable[Series]) -> int:
    """Write every series, grouped by metric name as OpenMetrics requires; returns samples written."""
    by_name: dict[str, list[Series]] = {}
    for one in series:
        by_name.setdefault(one.name, []).append(one)
    count = 0
    for name in sorted(by_name):
        for one in by_name[name]:
            selector = name + _labels(one.labels)
            for timestamp, value in one.points:
                out.write(f"{selector} {_value(value)} {timestamp:.3f}\n")
                count += 1
    out.write("# EOF\n")
    return count


def _labels(labels: Mapping[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in sorted(labels.items())) + "}"


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))
