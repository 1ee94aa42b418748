"""Repeated log lines aggregated: a flood of one warning (a refused delivery, an unreachable
Prometheus) is one line and a count, not thousands of lines that bury everything else.

`Aggregator` wraps a handler. The first WARNING (or worse) of a (logger, level, message template)
goes through and opens a window; repeats within it are counted, not written; when the window
closes (a timer; or the next record, or a flush, whichever comes first) one summary line says how
many there were, with the latest of them. Windows are per template, so two floods interleaved are
both bounded. INFO and DEBUG pass untouched: their volume is what the operator asked for (the
access log writes a line per request on purpose).

`writing_behind` is the daemon's logging: records are aggregated and queued on the thread that logs
them, and written by a thread of their own, so the event loop never waits for stderr (a pipe a
busy container runtime drains late blocks its writer). Aggregation comes before the queue: the
queue hands on each record's message already merged with its arguments, and the windows key on the
template.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from logging.handlers import QueueHandler
from typing import TextIO

WINDOW = 60.0  # seconds
# How long the writer gathers lines before it writes them (seconds).
LINGER = 0.02
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Every Prometheus call and every job start at INFO would drown what matters.
NOISY = ("apscheduler", "httpx", "httpcore")
Key = tuple[str, int, str]


def in_child(level: int, stream: TextIO | None = None, window: float = WINDOW) -> None:
    """The logging of a process the daemon started (an alert batch's diagnosis process): its lines
    as the daemon's, aggregated alike, written inline (no event loop there waits on them)."""
    target = logging.StreamHandler(stream if stream is not None else sys.stderr)
    target.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [Aggregator(target, window)]
    root.setLevel(level)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


@contextlib.contextmanager
def writing_behind(level: str, stream: TextIO | None = None, window: float = WINDOW) -> Iterator[Callable[[], None]]:
    """The root logger at `level`, writing to `stream` (stderr) from a thread of its own until the
    block ends; every record queued by then is written, and every open window summarised.

    Yields `drain`: write what is queued and summarise the open windows now, and every later
    record at once on the thread that logs it. Safe from a signal handler that interrupts a drain
    (a process about to end by a signal runs no `finally`)."""
    target = logging.StreamHandler(stream if stream is not None else sys.stderr)
    target.setFormatter(logging.Formatter(FORMAT))
    behind = _Behind(target)
    aggregator = Aggregator(QueueHandler(behind), window)  # type: ignore[arg-type]
    root = logging.getLogger()
    kept = root.level, root.handlers[:], {name: logging.getLogger(name).level for name in NOISY}
    root.handlers[:] = [aggregator]
    root.setLevel(level)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    behind.start()

    def drain() -> None:
        # Under the aggregator's lock every thread that logs waits: none queues a record that no
        # one would write. Reentrant, like the writer's lock, for a signal arriving mid-drain.
        with aggregator.lock or contextlib.nullcontext():
            aggregator.target = target
            behind.write_left()
        aggregator.flush()

    try:
        yield drain
    finally:
        drain()
        behind.stop()
        root.handlers[:] = kept[1]
        root.setLevel(kept[0])
        aggregator.close()
        target.close()
        for name, noisy_level in kept[2].items():
            logging.getLogger(name).setLevel(noisy_level)


class _Behind(threading.Thread):
    """The records queued (QueueHandler's queue: `put_nowait` never waits for the writer), written
    to `target` in order under `writing`, in batches: the writer wakes once per LINGER, not once
    per line, and writes its batch in one write. Woken per line, it took the GIL from the event
    loop a thousand times a second under a storm's access log (route-only acks p99 13.5 -> 21 ms,
    bench_storm). Lines leave the queue once written: a drain takes the lock and finds none half
    written, and one that interrupts another (a signal's handler on the same thread) writes again
    the lines it was cut in, rather than lose them."""

    def __init__(self, target: logging.StreamHandler[TextIO]) -> None:
        super().__init__(name="diagnosd-log-writer", daemon=True)
        self.target = target
        self.writing = threading.RLock()
        self._records: collections.deque[logging.LogRecord] = collections.deque()
        self._more = threading.Event()
        self._stopped = False

    def put_nowait(self, record: logging.LogRecord) -> None:
        self._records.append(record)  # atomic: the logging thread takes no lock here
        if not self._more.is_set():
            self._more.set()

    def run(self) -> None:
        while not self._stopped:
            self._more.wait()
            time.sleep(LINGER)  # the lines of the next LINGER join this batch
            self._more.clear()  # before taking them: one queued after is the next batch's
            self.write_left()

    def write_left(self) -> None:
        """Write, on the calling thread, what is queued."""
        with self.writing:
            batch = list(self._records)
            if not batch:
                return
            lines = []
            for record in batch:
                try:
                    lines.append(self.target.format(record) + self.target.terminator)
                except Exception:
                    self.target.handleError(record)
            with self.target.lock or contextlib.nullcontext():
                try:
                    self.target.stream.write("".join(lines))
                    self.target.flush()
                except Exception:
                    self.target.handleError(batch[0])
            for record in batch:  # a drain that interrupted this one may have taken them already
                if self._records and self._records[0] is record:
                    self._records.popleft()

    def stop(self) -> None:
        self._stopped = True
        self._more.set()
        self.join()
        self.write_left()


@dataclass
class _Run:
    started: float
    repeats: int = 0
    latest: logging.LogRecord | None = None


class Aggregator(logging.Handler):
    def __init__(
        self,
        target: logging.Handler,
        window: float = WINDOW,
        *,
        clock: Callable[[], float] = time.monotonic,
        timers: bool = True,
    ) -> None:
        """`timers`: close windows on time from a timer thread; without, only at the next record or
        a flush (tests drive the clock)."""
        super().__init__(target.level)
        self.target = target
        self.window = window
        self._clock = clock
        self._timers = timers
        self._runs: dict[Key, _Run] = {}
        self._timer: threading.Timer | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING:
            self.target.handle(record)
            return
        key = (record.name, record.levelno, str(record.msg))
        with self._guard():
            now = self._clock()
            self._close_expired(now)
            run = self._runs.get(key)
            if run is not None:
                run.repeats += 1
                run.latest = record
                return
            self._runs[key] = _Run(now)
            self._arm()
        self.target.handle(record)

    def flush(self) -> None:
        """Close every window now (a summary for each with repeats), then flush the target."""
        with self._guard():
            runs, self._runs = self._runs, {}
            now = self._clock()
        for run in runs.values():
            self._summarise(run, now)
        self.target.flush()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.flush()
        super().close()

    def _close_expired(self, now: float) -> None:
        for key, run in list(self._runs.items()):
            if now - run.started >= self.window:
                del self._runs[key]
                self._summarise(run, now)

    def _summarise(self, run: _Run, now: float) -> None:
        if run.latest is None:
            return
        latest = run.latest
        seconds = min(now - run.started, self.window)
        summary = logging.makeLogRecord(
            {
                "name": latest.name,
                "levelno": latest.levelno,
                "levelname": latest.levelname,
                "msg": "%s (repeated %d times in the last %s)",
                "args": (latest.getMessage(), run.repeats, f"{seconds:.0f}s" if seconds >= 1 else f"{seconds:.2f}s"),
            }
        )
        self.target.handle(summary)

    def _arm(self) -> None:
        """One timer at a time, for the earliest window to close."""
        if not self._timers or (self._timer is not None and self._timer.is_alive()):
            return
        earliest = min(run.started for run in self._runs.values())
        delay = max(earliest + self.window - self._clock(), 0.0)
        self._timer = threading.Timer(delay, self._tick)
        self._timer.daemon = True
        self._timer.start()

    def _tick(self) -> None:
        with self._guard():
            self._close_expired(self._clock())
            self._timer = None
            if self._runs:
                self._arm()

    def _guard(self) -> threading.RLock:
        # Reentrant (logging.Handler.createLock makes an RLock): emit runs with it already held.
        assert self.lock is not None
        return self.lock
