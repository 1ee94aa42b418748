"""Histories of many scenarios at once: the fault-free fleet is simulated once, each scenario forks from it.

Until a scenario's first fault begins, its fleet is the healthy fleet tick for tick (same seed,
same anchor, same noise), so that stretch is simulated once and shared; each scenario is copied
from the shared run just before its first fault and simulated on from there. Scenarios whose
faults are in force from the start of the history (configuration set before it) run on their own.
"""

from __future__ import annotations

import math
import multiprocessing
import pickle
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from diagnosd.sim import history
from diagnosd.sim.exposition import Labels
from diagnosd.sim.scenario import Scenario, seconds
from diagnosd.sim.schedule import LOOKS
from diagnosd.sim.simulator import HISTORY, Simulator
from diagnosd.sim.timeline import Timeline

Keep = Callable[[float], bool]
Looks = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Job:
    scenario: Scenario
    names: frozenset[str]
    extra: Labels


@dataclass(frozen=True)
class Clock:
    """What every simulator of a batch shares: the anchor, the seed, how far back and where densely;
    before `anchor - far` hourly ticks, of which only `far_names` are kept."""

    anchor: float
    seed: int
    history: float = HISTORY
    looks: Looks = LOOKS
    far: float = math.inf
    far_names: frozenset[str] = frozenset()

    def simulator(self, scenario: Scenario) -> Simulator:
        return Simulator(
            scenario, anchor=self.anchor, seed=self.seed, history=self.history, looks=self.looks, far=self.far
        )

    @property
    def before(self) -> tuple[float, frozenset[str]] | None:
        return None if math.isinf(self.far) else (self.anchor - self.far, self.far_names)


def histories(
    jobs: Sequence[Job],
    *,
    anchor: float,
    seed: int,
    keep: Keep | None = None,
    parallel: bool = True,
    history: float = HISTORY,
    looks: Looks = LOOKS,
    far: tuple[float, frozenset[str]] | None = None,
) -> Iterator[history.Series]:
    """Each job's series (in no particular order). Jobs that cannot fork run in a second process.

    `far` = (offset, names): before `anchor - offset` the simulators tick hourly and keep only those names.
    """
    clock = Clock(anchor, seed, history, looks, *(far or (math.inf, frozenset())))
    alone = [j for j in jobs if (start := _first_fault(j.scenario, anchor)) is not None and start <= anchor - history]
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        if job not in alone:
            groups.setdefault(job.scenario.fleet.model_dump_json() if job.scenario.fleet else "", []).append(job)
    if not (parallel and alone):
        for job in alone:
            yield _alone(job, clock, keep)
        for group in groups.values():
            yield from _group(group, clock, keep)
        return
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pending = pool.starmap_async(_alone, [(job, clock, keep) for job in alone])
        for group in groups.values():
            yield from _group(group, clock, keep)
        yield from pending.get()


def _first_fault(scenario: Scenario, anchor: float) -> float | None:
    starts = [anchor + seconds(f.start) for f in scenario.faults]
    return min(starts) if starts else None


def _group(jobs: list[Job], clock: Clock, keep: Keep | None) -> Iterator[history.Series]:
    anchor = clock.anchor
    first = jobs[0].scenario
    base = clock.simulator(first.model_copy(update={"faults": []}))
    names = frozenset().union(*(job.names for job in jobs))
    shared: history.Series = {}
    for job in sorted(jobs, key=lambda j: _first_fault(j.scenario, anchor) or anchor):
        start = _first_fault(job.scenario, anchor)
        fork = start if start is not None else anchor + 1.0
        while base.time < anchor and base.schedule.next(base.time) < fork:
            _tick_into(base, shared, names, keep, clock)
        child = pickle.loads(pickle.dumps(base, pickle.HIGHEST_PROTOCOL))  # much faster than deepcopy
        child.scenario = job.scenario
        child.timeline = Timeline(job.scenario.faults, anchor)
        own = history.collect(child, names=job.names, extra=job.extra, keep=keep, before=clock.before)
        yield _joined(shared, job, own)


def _alone(job: Job, clock: Clock, keep: Keep | None) -> history.Series:
    sim = clock.simulator(job.scenario)
    return history.collect(sim, names=job.names, extra=job.extra, keep=keep, before=clock.before)


def _tick_into(base: Simulator, shared: history.Series, names: frozenset[str], keep: Keep | None, clock: Clock) -> None:
    """Advance the shared run one tick, keeping its samples (without a scenario label)."""
    step = base.schedule.next(base.time)
    shared_part = history.collect(base, names=names, keep=keep, until=step, before=clock.before)
    for key, (times, values) in shared_part.items():
        found = shared.get(key)
        if found is None:
            shared[key] = (times, values)
        else:
            found[0].extend(times)
            found[1].extend(values)


def _joined(shared: history.Series, job: Job, own: history.Series) -> history.Series:
    out: history.Series = {}
    for (name, labels), (times, values) in shared.items():
        if name in job.names:
            out[(name, labels + job.extra)] = (array("d", times), array("d", values))
    for key, (times, values) in own.items():
        found = out.get(key)
        if found is None:
            out[key] = (times, values)
        else:
            found[0].extend(times)
            found[1].extend(values)
    return out
