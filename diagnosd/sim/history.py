"""A scenario's past as OpenMetrics with timestamps, for `promtool tsdb create-blocks-from openmetrics`.

The simulator runs from `anchor - history` to the anchor and every tick is sampled, so the file
holds exactly the series a live server continuing the same run serves from the anchor on.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

from diagnosd.promlocal import openmetrics
from diagnosd.sim import exporters
from diagnosd.sim.exposition import Family, Labels
from diagnosd.sim.simulator import Simulator

Series = dict[tuple[str, Labels], "tuple[array[float], array[float]]"]
Collect = Callable[[Simulator, frozenset[str] | None], list[Family]]

# Which exporter publishes a metric name (by prefix), to skip exporters a name filter does not need.
PREFIXES = {
    "vllm": ("vllm:", "vllm_", "process_"),
    "sglang": ("sglang:", "sglang_"),
    "dcgm": ("DCGM_",),
    "litellm": ("litellm_",),
    "ksm": ("kube_",),
    "node": ("node_",),
}


def collect(
    sim: Simulator,
    *,
    names: Collection[str] | None = None,
    extra: Labels = (),
    keep: Callable[[float], bool] | None = None,
    until: float | None = None,
    before: tuple[float, Collection[str]] | None = None,
) -> Series:
    """Every sample of every tick up to the anchor, by series.

    `names` keeps only those sample names, `keep` only the ticks it accepts (the simulation still
    runs every tick, so the values do not change); `before` = (time, names) only those of the
    ticks before that time (what long windows read far back).
    """
    near = _selection(None if names is None else frozenset(names))
    cutoff, far = -math.inf, near
    if before is not None:
        names_far = frozenset(before[1])
        cutoff, far = before[0], _selection(names_far if near[0] is None else names_far & near[0])
    index: Series = {}
    for t in sim.advance(sim.anchor if until is None else until):
        if keep is not None and not keep(t):
            continue
        wanted, needed = far if t < cutoff else near
        for collect_one in needed:
            for family in collect_one(sim, wanted):
                for sample in family.samples:
                    if wanted is not None and sample.name not in wanted:
                        continue
                    found = index.get((sample.name, sample.labels))
                    if found is None:
                        found = index[(sample.name, sample.labels)] = (array("d"), array("d"))
                    found[0].append(t)
                    found[1].append(sample.value)
    return {(name, labels + extra): points for (name, labels), points in index.items()} if extra else index


def _selection(wanted: frozenset[str] | None) -> tuple[frozenset[str] | None, list[Collect]]:
    """The names kept, and the exporters that publish any of them (all of them: no filter)."""
    needed: list[Collect] = [
        collect_one
        for exporter, collect_one in exporters.EXPORTERS.items()
        if wanted is None or any(n.startswith(PREFIXES[exporter]) for n in wanted)
    ]
    return wanted, needed


def write(path: Path, sim: Simulator, *, names: Collection[str] | None = None, extra: Labels = ()) -> int:
    """Run `sim` up to its anchor writing the history to `path`; returns the samples written."""
    series = collect(sim, names=names, extra=extra)
    with path.open("w", encoding="utf-8") as out:
        return openmetrics.write(out, as_series(series))


def as_series(series: Series) -> Iterator[openmetrics.Series]:
    """The collected columns as the OpenMetrics writer's series."""
    for (name, labels), (times, values) in series.items():
        yield openmetrics.Series(name, labels, zip(times, values, strict=True))
