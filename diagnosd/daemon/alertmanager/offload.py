"""Alert batches diagnosed in processes of their own, so that a storm's diagnoses never hold the
webhook's acks.

The daemon's event loop takes the deliveries; a batch's evaluation (its queries' answers decoded,
every target judged, then cut into each alert's part) is CPU work of up to hundreds of ms at a
thousand targets, and on the same loop it delayed every ack behind it (docs/benchmarks.md). Here
it runs in `processes` spawned processes (a ProcessPoolExecutor), each with a Diagnoser built as
the daemon's (compose.batch_diagnoser: the same rules, settings and deadline), its own HTTP
client to Prometheus, and a lower CPU priority than the
daemon's: when the two want the same core, the acks come first. What crosses back is small: each
alert's part of the diagnosis, and the self-metrics the child's Diagnoser reported (its queries,
the diagnosis's outcome and time), which the daemon's metrics then count as their own.

A child diagnoses with the rules the daemon loaded (sent along when it starts, never read again
from disk), and the daemon's clock crosses with each batch (`now`), so that a child tells a live
diagnosis from a post-mortem as the daemon would. The daemon's circuit stays the one that decides:
a batch is sent only when a process is free and the circuit admits a call (open, the batch fails
fast with CircuitOpen, as its queries would on the loop); the child's circuit (Heard) lets the
batch's calls through and keeps how each ended, and the daemon's circuit settles those in turn as
the loop would have. A child that dies (killed, out of memory) fails its batch
with DiagnosisProcessLost (retried as a Prometheus outage is) and the pool is started anew; one
found dead before a batch is sent costs that batch nothing. A child ignores the stop signals a
process group receives (the daemon stops it) and ends itself when the daemon is gone.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from datetime import datetime

from diagnosd.daemon.alertmanager.parts import OnLoop, Parting
from diagnosd.daemon.diagnoser import Diagnoser, Observer
from diagnosd.daemon.settings import Settings
from diagnosd.engine import Scope
from diagnosd.errors import CircuitOpen, DiagnosdError, DiagnosisProcessLost, SourceError
from diagnosd.findings.model import Diagnosis
from diagnosd.logs import in_child
from diagnosd.moments import Clock
from diagnosd.sources.circuit import Circuit, Policy, Ticket
from diagnosd.trees import RuleSet
from diagnosd.urls import redact

log = logging.getLogger(__name__)

# Builds a child's Diagnoser from the settings and the daemon's rules, reporting to the observer,
# on the given clock, behind the given circuit: a module-level function (compose.batch_diagnoser),
# since it crosses to the child by its name.
Builder = Callable[[Settings, RuleSet, Observer, Clock, Circuit], AbstractAsyncContextManager[Diagnoser]]
# How much lower a child's CPU priority is than the daemon's (nice(2) increments).
NICENESS = 10
# How long a child still diagnosing at shutdown is given before it is killed.
STOP_WAIT = 5.0


# One call as the child's circuit saw it end: (error, vouches, abandoned).
Call = tuple[SourceError | None, bool, bool]


@dataclass
class Tally:
    """The Observer of a child's Diagnoser: what it reported, sent back with each answer."""

    queries: list[tuple[str, float, SourceError | None]] = field(default_factory=list)
    diagnoses: list[tuple[str, str, str, float, tuple[SourceError, ...], datetime | None]] = field(default_factory=list)
    # What each call that reached the child's circuit met, in order (Heard): the daemon's circuit
    # settles these, not what the meter saw (a cached lookup, a call the deadline kept back).
    heard: list[Call] = field(default_factory=list)

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
        out = Tally(self.queries, self.diagnoses, self.heard)
        self.queries, self.diagnoses, self.heard = [], [], []
        return out

    def replay(self, to: Observer, now: datetime) -> None:
        """Into the daemon's metrics; a success stamped `now` (when its answer came back), as the
        loop stamps it when its diagnosis ends."""
        for query in self.queries:
            to.query(*query)
        for symptom, trigger, outcome, seconds, errors, succeeded in self.diagnoses:
            to.diagnosed(symptom, trigger, outcome, seconds, errors, now if succeeded is not None else None)

    def settle(self, circuit: Circuit, ticket: Ticket) -> None:
        """The batch's calls on the daemon's circuit, as the loop would have settled them: the
        first under the ticket that let the batch go, each later one admitted in turn (once the
        circuit opens, the loop would have refused the rest: they are not heard). A batch none of
        whose calls reached Prometheus gives its ticket up, as a cancelled call does."""
        if not self.heard:
            circuit.abandon(ticket)
            return
        for n, (error, vouches, abandoned) in enumerate(self.heard):
            if n:
                try:
                    ticket = circuit.admit(None)
                except CircuitOpen:
                    return
            if abandoned:
                circuit.abandon(ticket)
            else:
                circuit.settle(ticket, error, vouches=vouches)


class Heard(Circuit):
    """A child's circuit: it lets every call of its batch through (the daemon's circuit decided
    when it sent the batch, and settles what they met afterwards) and keeps how each ended, cut
    off by the deadline included (Circuit.cut_off settles a timeout)."""

    def __init__(self, url: str, tally: Tally) -> None:
        super().__init__(Policy(), url)
        self._tally = tally

    def admit(self, query: str | None) -> Ticket:
        return Ticket(0, probe=False)

    def settle(self, ticket: Ticket, error: SourceError | None, *, vouches: bool = True) -> None:
        self._tally.heard.append((error, vouches, False))

    def abandon(self, ticket: Ticket) -> None:
        self._tally.heard.append((None, True, True))


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


class _CannotStart(Exception):
    """The executor or a process of it could not be made (no /dev/shm for its locks, fork refused)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class Offloaded:
    """Parting (parts.py) in child processes."""

    def __init__(
        self,
        build: Builder,
        settings: Settings,
        rules: RuleSet,
        metrics: Observer,
        clock: Clock,
        *,
        processes: int,
        circuit: Circuit | None = None,
        fallback: Parting | None = None,
        niceness: int = NICENESS,
    ) -> None:
        self._start = (build, settings, rules, niceness, logging.getLogger().getEffectiveLevel())
        self._metrics = metrics
        self._clock = clock
        self._processes = processes
        self._circuit = circuit
        # A batch is admitted by the circuit only once a process is free to take it: one waiting
        # in the pool would hold a ticket taken before the circuit last changed.
        self._free = asyncio.Semaphore(processes)
        # Where batches go once no process can be started here (no /dev/shm for the executor's
        # locks, fork refused): the daemon's event loop, which diagnosed them before.
        self._fallback = fallback
        self._failed_start: OSError | None = None
        # Made at the first batch (its queues start multiprocessing's resource tracker, a process
        # of its own), as its processes are: a daemon that never gets an alert starts none.
        self._pool: ProcessPoolExecutor | None = None

    def _new_pool(self) -> ProcessPoolExecutor:
        # Spawned, not forked: the daemon has threads (the log writer, the executor's own) that a
        # fork would copy mid-lock.
        return ProcessPoolExecutor(
            self._processes, mp_context=multiprocessing.get_context("spawn"), initializer=_start, initargs=self._start
        )

    async def parts(
        self, symptom: str, scope: Scope, at: datetime, scopes: Sequence[Mapping[str, str]]
    ) -> list[Diagnosis]:
        if self._failed_start is not None and self._fallback is not None:
            return await self._fallback.parts(symptom, scope, at, scopes)
        async with self._free:
            return await self._parts(symptom, scope, at, scopes)

    async def _parts(
        self, symptom: str, scope: Scope, at: datetime, scopes: Sequence[Mapping[str, str]]
    ) -> list[Diagnosis]:
        if self._failed_start is not None and self._fallback is not None:
            return await self._fallback.parts(symptom, scope, at, scopes)
        ask = Ask(symptom, scope, at, self._clock(), tuple(dict(s) for s in scopes))
        # Raises CircuitOpen while the daemon's circuit is open; half-open, this batch is the probe.
        ticket = self._circuit.admit(None) if self._circuit is not None else None
        try:
            pool, future = self._submit(ask)
            try:
                answer = await asyncio.wrap_future(future)
            except BrokenProcessPool as error:  # it died diagnosing this batch
                try:
                    self._renew(pool, error)
                except OSError as cannot:  # and no other can start: the next batches go to the loop
                    self._cannot_start(cannot)
                raise DiagnosisProcessLost(symptom, str(error)) from None
        except BaseException as error:
            if ticket is not None and self._circuit is not None:
                self._circuit.abandon(ticket)
            if isinstance(error, _CannotStart) and self._fallback is not None:
                self._cannot_start(error.error)
                return await self._fallback.parts(symptom, scope, at, scopes)
            if isinstance(error, _CannotStart):
                raise error.error from None
            raise
        if ticket is not None and self._circuit is not None:
            answer.tally.settle(self._circuit, ticket)
        answer.tally.replay(self._metrics, self._clock())
        if answer.error is not None:
            raise answer.error
        return list(answer.parts)

    def _cannot_start(self, error: OSError) -> None:
        if self._fallback is None:
            return
        self._failed_start = error
        log.error("alerts: cannot start a diagnosis process (%s); diagnosing on the event loop", error)

    def _submit(self, ask: Ask) -> tuple[ProcessPoolExecutor, Future[Answer]]:
        """The batch sent: the pool it went to, and its answer to come. Raises _CannotStart when no
        process can be started here."""
        try:
            pool = self._pool = self._pool or self._new_pool()
            try:
                return pool, pool.submit(_diagnose, ask)
            except BrokenProcessPool as error:  # it died idle: this batch was never sent
                pool = self._renew(pool, error)
                return pool, pool.submit(_diagnose, ask)
        except OSError as error:
            raise _CannotStart(error) from error

    def _renew(self, pool: ProcessPoolExecutor, error: BrokenProcessPool) -> ProcessPoolExecutor:
        """The pool after `pool` was found broken: a new one, started by the first batch to find it."""
        if pool is self._pool or self._pool is None:
            log.warning("alerts: the diagnosis process died (%s); starting it again", error)
            pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._new_pool()
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await asyncio.to_thread(_stop, self._pool)

    def pids(self) -> list[int]:
        """The children's process ids (the self-checks and tests look at them)."""
        if self._pool is None:
            return []
        return [process.pid for process in _processes(self._pool) if process.pid is not None]


def _stop(pool: ProcessPoolExecutor) -> None:
    """Shut the pool down without waiting out a diagnosis: a batch cut off here stays queued in the
    store, under a lease that lapses, as one cut off on the event loop does."""
    processes = list(_processes(pool))
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + STOP_WAIT  # one wait for them all, not one each
    for process in processes:
        process.join(max(deadline - time.monotonic(), 0.0))
    for process in processes:
        if process.is_alive():  # it ignores SIGTERM (the process group's): killed
            process.kill()
            process.join(STOP_WAIT)


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
    # Diagnoses a batch as the daemon's loop does with no process (parts.OnLoop).
    parting: OnLoop | None = None
    # Holds the Diagnoser's HTTP client open for the process's life.
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)


_child: _Child | None = None


def _start(build: Builder, settings: Settings, rules: RuleSet, niceness: int, level: int) -> None:
    global _child  # one per child process, made by the executor's initializer
    # A terminal's Ctrl-C, and systemd, tini -g or dumb-init's SIGTERM, reach the whole process
    # group: the daemon decides when this one stops (its batch in flight then stays queued).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _end_with_the_daemon()
    os.nice(niceness)
    in_child(level)
    child = _Child(asyncio.new_event_loop(), Tally())

    def clock() -> datetime:
        if child.now is None:
            raise RuntimeError("a diagnosis process asked the time outside a batch")
        return child.now

    built = build(settings, rules, child.tally, clock, Heard(redact(settings.prometheus.url), child.tally))
    child.parting = OnLoop(child.loop.run_until_complete(child.stack.enter_async_context(built)))
    _child = child
    log.info("diagnosis process %d started: %d trees, nice +%d", os.getpid(), len(rules.trees), niceness)


def _end_with_the_daemon() -> None:
    """A daemon killed outright (SIGKILL, out of memory) never stops its children: each would wait
    on the executor's queue for ever. A thread here waits for the daemon's end and ends the child."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="daemon-watch", daemon=True).start()


def _diagnose(ask: Ask) -> Answer:
    child = _child
    if child is None or child.parting is None:
        raise RuntimeError("a diagnosis process that was not started")
    child.now = ask.now
    try:
        parts = child.loop.run_until_complete(child.parting.parts(ask.symptom, ask.scope, ask.at, ask.scopes))
        return Answer(tuple(parts), None, child.tally.taken())
    except DiagnosdError as error:
        return Answer((), error, child.tally.taken())
