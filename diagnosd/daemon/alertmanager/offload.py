"""Alert batches diagnosed in processes of their own, so that a storm's diagnoses never hold the
webhook's acks.

The daemon's event loop takes the deliveries; a batch's evaluation (its queries' answers decoded,
every target judged, then cut into each alert's part) is CPU work of up to hundreds of ms at a
thousand targets, and on the same loop it delayed every ack behind it (docs/benchmarks.md). Here
it runs in `processes` spawned processes (a ProcessPoolExecutor), each with a Diagnoser built as
the daemon's (compose.batch_diagnoser: the same rules, settings, circuit and deadline; a
circuit of its own), its own HTTP client to Prometheus, and a lower CPU priority than the
daemon's: when the two want the same core, the acks come first. What crosses back is small: each
alert's part of the diagnosis, and the self-metrics the child's Diagnoser reported (its queries,
the diagnosis's outcome and time), which the daemon's metrics then count as their own.

The daemon's clock crosses with each batch (`now`), so that a child tells a live diagnosis from a
post-mortem as the daemon would. A child that dies (killed, out of memory) fails its batch with
DiagnosisProcessLost (retried as a Prometheus outage is) and the pool is started anew.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime

from diagnosd.daemon.alertmanager.parts import cut
from diagnosd.daemon.diagnoser import Diagnoser, Observer
from diagnosd.daemon.settings import Settings
from diagnosd.engine import Scope
from diagnosd.errors import DiagnosdError, DiagnosisProcessLost, SourceError
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import Diagnosis
from diagnosd.logs import in_child
from diagnosd.moments import Clock

log = logging.getLogger(__name__)

# Builds a child's Diagnoser from the settings, reporting to the observer, on the given clock: a
# module-level function (compose.batch_diagnoser), since it crosses to the child by its name.
Builder = Callable[[Settings, Observer, Clock], AbstractAsyncContextManager[Diagnoser]]
# How much lower a child's CPU priority is than the daemon's (nice(2) increments).
NICENESS = 10
# How long a child still diagnosing at shutdown is given before it is terminated.
STOP_WAIT = 5.0


@dataclass
class Tally:
    """The Observer of a child's Diagnoser: what it reported, sent back with each answer."""

    queries: list[tuple[str, float, SourceError | None]] = field(default_factory=list)
    diagnoses: list[tuple[str, str, str, float, tuple[SourceError, ...], datetime | None]] = field(default_factory=list)

    def trees_loaded(self, symptoms: Iterable[str]) -> None:
        return None  # the daemon's own metrics were given every tree when it started

    def query(self, endpoint: str, seconds: float, error: SourceError | None) -> None:
        self.queries.append((endpoint, seconds, error))

    def diagnosed(
        self,
        symptom: str,
        trigger: str,
        outcome: str,
        seconds: float,
        errors: Sequence[SourceError],
        succeeded_at: datetime | None,
    ) -> None:
        self.diagnoses.append((symptom, trigger, outcome, seconds, tuple(errors), succeeded_at))

    def taken(self) -> Tally:
        """What was reported since the last call, leaving this tally empty."""
        out = Tally(self.queries, self.diagnoses)
        self.queries, self.diagnoses = [], []
        return out

    def replay(self, to: Observer) -> None:
        for query in self.queries:
            to.query(*query)
        for diagnosis in self.diagnoses:
            to.diagnosed(*diagnosis)


@dataclass(frozen=True)
class Ask:
    symptom: str
    scope: Scope
    at: datetime
    now: datetime  # the daemon's clock when it asked
    scopes: tuple[Mapping[str, str], ...]


@dataclass(frozen=True)
class Answer:
    parts: tuple[Diagnosis, ...]
    error: DiagnosdError | None
    tally: Tally


class Offloaded:
    """Parting (parts.py) in child processes."""

    def __init__(
        self,
        build: Builder,
        settings: Settings,
        metrics: Observer,
        clock: Clock,
        *,
        processes: int,
        niceness: int = NICENESS,
    ) -> None:
        self._start = (build, settings, niceness, logging.getLogger().getEffectiveLevel())
        self._metrics = metrics
        self._clock = clock
        self._processes = processes
        self._pool = self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        # Spawned, not forked: the daemon has threads (the log writer, the executor's own) that a
        # fork would copy mid-lock. Processes start at the first batch, not with the daemon.
        return ProcessPoolExecutor(
            self._processes, mp_context=multiprocessing.get_context("spawn"), initializer=_start, initargs=self._start
        )

    async def parts(
        self, symptom: str, scope: Scope, at: datetime, scopes: Sequence[Mapping[str, str]]
    ) -> list[Diagnosis]:
        ask = Ask(symptom, scope, at, self._clock(), tuple(dict(s) for s in scopes))
        pool = self._pool
        try:
            answer = await asyncio.get_running_loop().run_in_executor(pool, _diagnose, ask)
        except BrokenProcessPool as error:
            if pool is self._pool:  # the first batch to find it broken starts the next pool
                log.warning("alerts: the diagnosis process died (%s); starting it again", error)
                pool.shutdown(wait=False, cancel_futures=True)
                self._pool = self._new_pool()
            raise DiagnosisProcessLost(symptom, str(error)) from None
        answer.tally.replay(self._metrics)
        if answer.error is not None:
            raise answer.error
        return list(answer.parts)

    async def close(self) -> None:
        await asyncio.to_thread(_stop, self._pool)

    def pids(self) -> list[int]:
        """The children's process ids (the self-checks and tests look at them)."""
        return [process.pid for process in _processes(self._pool) if process.pid is not None]


def _stop(pool: ProcessPoolExecutor) -> None:
    """Shut the pool down without waiting out a diagnosis: a batch cut off here stays queued in the
    store, under a lease that lapses, as one cut off on the event loop does."""
    processes = list(_processes(pool))
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(STOP_WAIT)
        if process.is_alive():
            process.terminate()
            process.join()


def _processes(pool: ProcessPoolExecutor) -> list[multiprocessing.process.BaseProcess]:
    # The executor keeps its processes private, and has no terminate before Python 3.14.
    found: dict[int, multiprocessing.process.BaseProcess] | None = getattr(pool, "_processes", None)
    return list((found or {}).values())


# The child's side: its Diagnoser and event loop, made once by `_start`, used by each `_diagnose`.


@dataclass
class _Child:
    loop: asyncio.AbstractEventLoop
    tally: Tally
    now: datetime | None = None
    diagnoser: Diagnoser | None = None
    # Holds the Diagnoser's HTTP client open for the process's life.
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)


_child: _Child | None = None


def _start(build: Builder, settings: Settings, niceness: int, level: int) -> None:
    global _child  # one per child process, made by the executor's initializer
    # A terminal's Ctrl-C reaches the whole process group: the daemon decides when this one stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(niceness)
    in_child(level)
    child = _Child(asyncio.new_event_loop(), Tally())

    def clock() -> datetime:
        if child.now is None:
            raise RuntimeError("a diagnosis process asked the time outside a batch")
        return child.now

    built = build(settings, child.tally, clock)
    child.diagnoser = child.loop.run_until_complete(child.stack.enter_async_context(built))
    _child = child


def _diagnose(ask: Ask) -> Answer:
    child = _child
    if child is None or child.diagnoser is None:
        raise RuntimeError("a diagnosis process that was not started")
    child.now = ask.now
    try:
        parts = child.loop.run_until_complete(_parts(child.diagnoser, ask))
        return Answer(tuple(parts), None, child.tally.taken())
    except DiagnosdError as error:
        return Answer((), error, child.tally.taken())


async def _parts(diagnoser: Diagnoser, ask: Ask) -> list[Diagnosis]:
    looked = await diagnoser.diagnose(diagnoser.tree(ask.symptom), ask.scope, ask.at, Trigger.ALERT)
    return await cut(looked.diagnosis, ask.scopes, turn=False)
