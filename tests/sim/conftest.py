"""Shared pieces of the simulator tests: a fixed anchor, and short runs of the shipped scenarios."""

from __future__ import annotations

from datetime import UTC, datetime

from diagnosd.sim import scenario
from diagnosd.sim.exporters import families
from diagnosd.sim.exposition import Family
from diagnosd.sim.simulator import Simulator

# A fixed moment, so that every run of the suite simulates exactly the same fleet.
ANCHOR = datetime(2026, 11, 20, 15, 0, tzinfo=UTC).timestamp()


def short(name: str, *, history: float = 7200.0, seed: int = 0, run: bool = True) -> Simulator:
    """A scenario simulated over a short history up to the anchor (earlier faults in force from the start)."""
    sim = Simulator(scenario.load(name), anchor=ANCHOR, history=history, coarse=900.0, seed=seed)
    if run:
        sim.run(ANCHOR)
    return sim


def samples(sim: Simulator) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, s.labels): s.value for f in families(sim) for s in f.samples}


def by_name(fams: list[Family], name: str) -> Family:
    return next(f for f in fams if f.name == name)
