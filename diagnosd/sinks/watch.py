"""What the push sinks (Alertmanager, Grafana) read from the tracker: which findings fire now, which
episodes started firing and which stopped since the last look.

A sink looks when the tracker wakes it and on its own ticks; it never sees pending findings (like
Prometheus, nothing is sent before `for` has passed). An episode is a fingerprint and the moment it
became active: the same cause back on the same target is a new episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from diagnosd.findings.lifecycle import Finding, State

log = logging.getLogger(__name__)


class Wording(Protocol):
    """A finding in words, in the configured language (diagnosd.render.finding builds it)."""

    @property
    def summary(self) -> str: ...
    @property
    def evidence(self) -> tuple[str, ...]: ...
    @property
    def remediation(self) -> tuple[str, ...]: ...


Describe = Callable[[Finding], Wording]
PostCount = Callable[[str, str, int], None]  # (sink, outcome, how many)


@dataclass(frozen=True)
class Look:
    # Every firing finding, with the evidence of its latest diagnosis.
    firing: tuple[Finding, ...]
    # Episodes firing now that were not at the last look.
    started: tuple[Finding, ...]
    # Episodes firing at the last look that no longer are (resolved, or replaced by a new episode).
    ended: tuple[Finding, ...]


class Watch:
    def __init__(self, active: Callable[[], Iterable[Finding]]) -> None:
        self._active = active
        self._firing: dict[str, Finding] = {}

    def look(self) -> Look:
        firing = {f.fingerprint: f for f in self._active() if f.state is State.FIRING}
        started, ended = [], []
        for fp, f in firing.items():
            before = self._firing.get(fp)
            if before is None or before.phase.active_at != f.phase.active_at:
                started.append(f)
                if before is not None:
                    ended.append(before)
        ended += [f for fp, f in self._firing.items() if fp not in firing]
        self._firing = firing
        return Look(tuple(firing.values()), tuple(started), tuple(ended))


class Wake:
    """The tracker's nudge: safe to call from any thread, and before the sink has started."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        self._loop = asyncio.get_running_loop()

    def __call__(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.event.set)


async def keep_looking(watch: Watch, wake: Wake, tick: float, seen: Callable[[Look, bool], None]) -> None:
    """Look at once, then whenever woken and every `tick` seconds; `seen(look, ticked)`. Until cancelled."""
    loop = asyncio.get_running_loop()
    due = loop.time()
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.event.wait(), max(due - loop.time(), 0))
        wake.event.clear()
        ticked = loop.time() >= due
        if ticked:
            due = loop.time() + tick
        try:
            seen(watch.look(), ticked)
        except Exception:  # a bug here must not end the sink's task: the next look tries again
            log.exception("could not read the findings for a push sink")
