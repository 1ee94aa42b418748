"""A circuit breaker around the shared Prometheus source: a Prometheus that keeps failing is left
alone for a cool-down instead of being asked at every round's and every alert's full cadence.

Closed, every call goes through; `failures` consecutive calls that say Prometheus itself is unwell
(unreachable, timed out, a 5xx or 429 after the source's own retries) open it, and so does one
answer with a Retry-After (Prometheus asked not to be called for that long). Open, calls fail fast
with CircuitOpen, never "no problem": the checks read unknown, the CLI exits 3, REST answers 503.
After a cool-down, doubled at each consecutive opening up to `max_cooldown`, shortened by up to
JITTER at random (replicas do not probe in step) and never shorter than a Retry-After (itself
capped at `max_cooldown`), the next call is the probe: half-open, the others fail fast until it
ends. A probe Prometheus answers closes the circuit and resets the backoff; one that fails opens
it again. A rejected query (a 4xx) says nothing of Prometheus' health: it neither counts nor resets.

One lives as long as the daemon (compose.open_services), or as one command (compose.diagnoser).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol, TypeVar

from diagnosd.errors import CircuitOpen, DeadlineExceeded, SourceError, SourceTimeout, SourceUnavailable
from diagnosd.sources.base import QuerySource, Sample
from diagnosd.sources.deadline import time_left

log = logging.getLogger(__name__)

T = TypeVar("T")
# At most this share of a cool-down is taken off at random.
JITTER = 0.2
# A call cancelled this close to its diagnosis's deadline was cut off by it (the event loop may run
# a timer up to its clock resolution early).
EXPIRED = 0.01


class State(StrEnum):
    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"


@dataclass(frozen=True)
class Policy:
    failures: int = 5
    cooldown: float = 5.0  # seconds, before the first probe
    max_cooldown: float = 300.0


@dataclass(frozen=True)
class Status:
    """The circuit as /readyz shows it."""

    state: State
    failures: int  # consecutive failed calls (those that opened it, and failed probes since)
    openings: int  # consecutive openings without an answered probe between
    probe_in: float | None  # open: seconds until the next call may probe (0: due now)
    last: str | None  # what the last failed call said


class Watch(Protocol):
    """Who hears of transitions (the self-metrics)."""

    def circuit_state(self, state: State) -> None: ...

    def circuit_opened(self) -> None: ...


def unwell(error: SourceError) -> bool:
    """Whether a failed call says Prometheus itself is unwell, rather than this one query is bad."""
    if isinstance(error, CircuitOpen | DeadlineExceeded):  # not an answer of Prometheus at all
        return False
    if isinstance(error, SourceUnavailable | SourceTimeout):
        return True
    return error.status is not None and (error.status >= 500 or error.status == 429)


@dataclass(frozen=True)
class Ticket:
    generation: int  # the circuit's, when the call was let through: a later answer is stale
    probe: bool


class Circuit:
    """The state machine; no I/O. `clock` gives monotonic seconds, `rand` a number in [0, 1)."""

    def __init__(
        self,
        policy: Policy,
        url: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
        watch: Watch | None = None,
    ) -> None:
        self._policy = policy
        self._url = url
        self._clock = clock
        self._rand = rand
        self._watch = watch
        self._state = State.CLOSED
        self._generation = 0
        self._failures = 0
        self._openings = 0
        self._probe_at = 0.0
        self._last: SourceError | None = None

    def status(self) -> Status:
        probe_in = max(self._probe_at - self._clock(), 0.0) if self._state is State.OPEN else None
        last = self._last.detail if self._last is not None else None
        return Status(self._state, self._failures, self._openings, probe_in, last)

    def admit(self, query: str | None) -> Ticket:
        """Let a call through (as the probe when one is due), or raise CircuitOpen."""
        if self._state is State.OPEN and self._clock() >= self._probe_at:
            self._become(State.HALF_OPEN)
            return Ticket(self._generation, probe=True)
        if self._state is State.CLOSED:
            return Ticket(self._generation, probe=False)
        raise self._refusal(query)

    def settle(self, ticket: Ticket, error: SourceError | None, *, vouches: bool = True) -> None:
        """How a call let through ended. `vouches`: a success may reset the count of failures (a
        readiness probe's `vector(1)` does not: it must not keep a failing circuit closed)."""
        if ticket.generation != self._generation:
            return  # sent before the circuit last changed: an opening already counted it, or a probe decided
        if error is not None and unwell(error):
            self._failures += 1
            self._last = error
            if ticket.probe or self._failures >= self._policy.failures or _asked(error) > 0:
                self._open(error)
        elif ticket.probe:  # answered, even if only to refuse a bad query: Prometheus serves
            self._close()
        elif error is None and vouches:
            self._failures = 0

    def cut_off(self, ticket: Ticket, query: str | None) -> None:
        """A call still unanswered when its diagnosis's deadline cancelled it: Prometheus did not
        answer within the whole budget, a timeout like any other (the per-query timeout times the
        retries may be longer than the deadline, so it would otherwise never be seen)."""
        self.settle(ticket, SourceTimeout("no answer by the diagnosis deadline", url=self._url, query=query))

    def abandon(self, ticket: Ticket) -> None:
        """A call given up (its request or diagnosis cancelled) proved nothing; a probe given up
        lets the next caller probe, with no new cool-down."""
        if ticket.probe and ticket.generation == self._generation:
            self._probe_at = self._clock()
            self._become(State.OPEN)

    def _open(self, error: SourceError) -> None:
        self._openings += 1
        policy = self._policy
        backoff = min(policy.cooldown * 2 ** min(self._openings - 1, 32), policy.max_cooldown)
        cooldown = max(backoff * (1 - JITTER * self._rand()), min(_asked(error), policy.max_cooldown))
        self._probe_at = self._clock() + cooldown
        self._become(State.OPEN)
        if self._watch is not None:
            self._watch.circuit_opened()
        log.warning(
            "Prometheus circuit open after %d consecutive failed calls (last: %s); next probe in %.1fs",
            self._failures,
            error.detail,
            cooldown,
        )

    def _close(self) -> None:
        was = self._failures
        self._failures = self._openings = 0
        self._become(State.CLOSED)
        log.info("Prometheus circuit closed: it answered the probe after %d failed calls", was)

    def _become(self, state: State) -> None:
        self._state = state
        self._generation += 1
        if self._watch is not None:
            self._watch.circuit_state(state)

    def _refusal(self, query: str | None) -> CircuitOpen:
        last = self._last.detail if self._last is not None else "no detail"
        seen = f"after {self._failures} consecutive failed calls (last: {last})"
        if self._state is State.HALF_OPEN:
            message, wait = f"circuit half-open {seen}: one probe is asking Prometheus now", None
        else:
            wait = max(self._probe_at - self._clock(), 0.0)
            message = f"circuit open {seen}; next probe in {wait:.0f}s"
        return CircuitOpen(message, url=self._url, query=query, failures=self._failures, last=last, retry_after=wait)


def _asked(error: SourceError) -> float:
    """The Retry-After a failure came with, 0 without one."""
    return (error.retry_after or 0.0) if isinstance(error, SourceUnavailable) else 0.0


class CircuitSource:
    """A QuerySource through a Circuit; `check` is the readiness probe's way in."""

    def __init__(self, inner: QuerySource, circuit: Circuit) -> None:
        self._inner = inner
        self.circuit = circuit

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        return await self._through(lambda: self._inner.query(promql, at), promql)

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        return await self._through(lambda: self._inner.metric_names(candidates, start, end, where), None)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        method = getattr(self._inner, "metadata", None)
        if method is None:
            return None
        found: dict[str, str] | None = await self._through(lambda: method(names), None)
        return found

    async def check(self, promql: str, at: datetime) -> list[Sample]:
        """A query whose failure counts and whose success does not reset the count: a readiness
        probe answered every few seconds must not hold open a circuit the real queries would close,
        nor keep closed one they would open. It may be the half-open probe (at most one per cool-down)."""
        return await self._through(lambda: self._inner.query(promql, at), promql, vouches=False)

    async def _through(self, ask: Callable[[], Awaitable[T]], query: str | None, *, vouches: bool = True) -> T:
        ticket = self.circuit.admit(query)
        try:
            answer = await ask()
        except SourceError as error:
            self.circuit.settle(ticket, error)
            raise
        except asyncio.CancelledError:
            left = time_left()
            if left is not None and left <= EXPIRED:
                self.circuit.cut_off(ticket, query)
            else:
                self.circuit.abandon(ticket)
            raise
        except BaseException:
            self.circuit.abandon(ticket)
            raise
        self.circuit.settle(ticket, None, vouches=vouches)
        return answer
