"""Repeated log lines aggregated (diagnosd/logs.py): the first of a template goes through, repeats
within the window are counted, and one summary line says how many there were. The clock is
injected and timers are off: windows close at the next record or a flush, never by waiting. And the
daemon's logging, written behind by a thread of its own: a stream that blocks never holds the
thread that logs."""

from __future__ import annotations

import io
import logging
import re
import threading
import time
from collections.abc import Iterator

import pytest

from diagnosd.logs import LINGER, Aggregator, in_child, writing_behind


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    """What would have been written: every record that reached the real handler, formatted."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.summarised = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")
        if "repeated" in record.getMessage():
            self.summarised.set()


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


@pytest.fixture
def lines() -> Lines:
    return Lines()


@pytest.fixture
def log(ticks: Ticks, lines: Lines) -> Iterator[logging.Logger]:
    logger = logging.getLogger("diagnosd.test.flood")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = Aggregator(lines, window=60, clock=ticks, timers=False)
    logger.addHandler(handler)
    yield logger
    logger.removeHandler(handler)
    handler.close()


def test_a_flood_of_one_warning_is_two_lines_and_the_summary_counts_the_rest(
    log: logging.Logger, lines: Lines, ticks: Ticks
) -> None:
    for n in range(5000):
        log.warning("delivery %d refused: queue full", n)
        ticks.now += 0.01  # 50 s in all, within one window
    for handler in log.handlers:
        handler.flush()
    assert lines.lines == [
        "WARNING diagnosd.test.flood: delivery 0 refused: queue full",
        "WARNING diagnosd.test.flood: delivery 4999 refused: queue full (repeated 4999 times in the last 50s)",
    ]


def test_the_window_closing_writes_the_summary_before_the_next_occurrence(
    log: logging.Logger, lines: Lines, ticks: Ticks
) -> None:
    for _ in range(3):
        for _ in range(100):
            log.warning("cannot reach Prometheus")
        ticks.now += 61  # each batch in a window of its own
    assert lines.lines == [
        "WARNING diagnosd.test.flood: cannot reach Prometheus",
        "WARNING diagnosd.test.flood: cannot reach Prometheus (repeated 99 times in the last 60s)",
        "WARNING diagnosd.test.flood: cannot reach Prometheus",
        "WARNING diagnosd.test.flood: cannot reach Prometheus (repeated 99 times in the last 60s)",
        "WARNING diagnosd.test.flood: cannot reach Prometheus",
    ]


def test_two_floods_interleaved_are_both_bounded_and_levels_are_apart(
    log: logging.Logger, lines: Lines, ticks: Ticks
) -> None:
    for n in range(1000):
        log.warning("alert %d: could not diagnose", n)
        log.error("round %d failed", n)
        log.warning("alert %d: could not diagnose", n)
    log.error("alert %d: could not diagnose", 7)  # same template, another level: its own line
    ticks.now += 60
    log.warning("something else")  # closes both windows
    assert lines.lines == [
        "WARNING diagnosd.test.flood: alert 0: could not diagnose",
        "ERROR diagnosd.test.flood: round 0 failed",
        "ERROR diagnosd.test.flood: alert 7: could not diagnose",
        "WARNING diagnosd.test.flood: alert 999: could not diagnose (repeated 1999 times in the last 60s)",
        "ERROR diagnosd.test.flood: round 999 failed (repeated 999 times in the last 60s)",
        "WARNING diagnosd.test.flood: something else",
    ]


def test_info_and_debug_pass_untouched(log: logging.Logger, lines: Lines) -> None:
    for _ in range(50):
        log.info('127.0.0.1 - "POST /webhook/alertmanager HTTP/1.1" 503')
        log.debug("asked")
    assert len(lines.lines) == 100


def test_a_single_occurrence_has_no_summary(log: logging.Logger, lines: Lines, ticks: Ticks) -> None:
    log.warning("once")
    ticks.now += 120
    log.warning("once")
    for handler in log.handlers:
        handler.flush()
    assert lines.lines == ["WARNING diagnosd.test.flood: once", "WARNING diagnosd.test.flood: once"]


def test_a_window_closes_on_time_when_nothing_else_is_logged(lines: Lines) -> None:
    handler = Aggregator(lines, window=0.05)  # the real clock and the timer thread
    logger = logging.getLogger("diagnosd.test.timer")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        for _ in range(10):
            logger.warning("store locked")
        assert lines.summarised.wait(timeout=10)
    finally:
        logger.removeHandler(handler)
        handler.close()
    first, summary = lines.lines
    assert first == "WARNING diagnosd.test.timer: store locked"
    assert summary.startswith("WARNING diagnosd.test.timer: store locked (repeated 9 times in the last 0.0")


class Blocked(io.StringIO):
    """stderr as a pipe nobody drains yet: a write waits until `drained` is set (2 s at most, then
    the pipe counts as drained: a logger that waited fails the test once, not once per line)."""

    def __init__(self) -> None:
        super().__init__()
        self.drained = threading.Event()

    def write(self, text: str) -> int:
        if not self.drained.wait(timeout=2):
            self.drained.set()
        return super().write(text)


def test_the_daemon_logs_without_waiting_for_its_stream() -> None:
    stream = Blocked()
    logger = logging.getLogger("diagnosd.test.behind")
    root = logging.getLogger()
    before = root.handlers[:]
    with writing_behind("INFO", stream):
        started = time.monotonic()
        for n in range(50):
            logger.info("POST /webhook/alertmanager %d", n)
        # Written by now, the stream would have held this thread for each line.
        assert time.monotonic() - started < 1
        assert stream.getvalue() == ""
        stream.drained.set()
    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1] for line in lines] == [f"POST /webhook/alertmanager {n}" for n in range(50)]
    assert lines[0].split()[2:4] == ["INFO", "diagnosd.test.behind:"]
    assert root.handlers == before  # the caller's logging is back


def test_written_behind_a_flood_is_still_one_line_and_a_count() -> None:
    # The queue merges each message with its arguments: aggregating after it would see 20
    # different messages, each written.
    stream = io.StringIO()
    with writing_behind("INFO", stream):
        for n in range(20):
            logging.getLogger("diagnosd.test.behind").warning("delivery %d refused: queue full", n)
    first, summary = stream.getvalue().splitlines()
    assert first.endswith("delivery 0 refused: queue full")
    # The span is wall-clock time: whatever a loaded machine makes it, the count is what holds.
    assert re.search(r"delivery 19 refused: queue full \(repeated 19 times in the last \d+\.\d\ds\)$", summary)


def test_a_traceback_is_written_behind_whole() -> None:
    stream = io.StringIO()
    with writing_behind("INFO", stream):
        try:
            raise ValueError("bad answer")
        except ValueError:
            logging.getLogger("diagnosd.test.behind").exception("round failed")
    text = stream.getvalue()
    assert "ERROR diagnosd.test.behind: round failed\nTraceback (most recent call last):" in text
    assert text.rstrip().endswith("ValueError: bad answer")


class Counted(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_lines_logged_together_are_written_in_one_write() -> None:
    # One write, and one wake of the writer thread, per batch: woken per line it took the GIL from
    # the event loop for every access line of a storm.
    stream = Counted()
    with writing_behind("INFO", stream):
        for n in range(200):
            logging.getLogger("diagnosd.test.behind").info("POST /webhook/alertmanager %d", n)
        deadline = time.monotonic() + 5
        while len(stream.getvalue().splitlines()) < 200 and time.monotonic() < deadline:
            time.sleep(LINGER)  # written by the writer thread, before the block's end would
        assert len(stream.getvalue().splitlines()) == 200
    assert stream.writes <= 20  # 200 woken per line


def test_a_child_process_logs_as_the_daemon_aggregated_and_quiet_about_http() -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    kept = root.level, root.handlers[:], logging.getLogger("httpx").level
    try:
        in_child(logging.INFO, stream)
        for n in range(20):
            logging.getLogger("diagnosd.test.child").warning("could not diagnose %d: refused", n)
        logging.getLogger("httpx").info('HTTP Request: POST /api/v1/query "HTTP/1.1 200 OK"')
        logging.getLogger("diagnosd.test.child").info("diagnosed")
        for handler in root.handlers:
            handler.flush()
    finally:
        for handler in root.handlers:
            handler.close()
        root.setLevel(kept[0])
        root.handlers[:] = kept[1]
        logging.getLogger("httpx").setLevel(kept[2])
    lines = stream.getvalue().splitlines()
    assert lines[0].split()[2:4] == ["WARNING", "diagnosd.test.child:"]
    assert lines[0].endswith("could not diagnose 0: refused")
    # The flood is its first line and a summary (written at the flush); INFO passes at once.
    assert len(lines) == 3
    assert lines[1].endswith("INFO diagnosd.test.child: diagnosed")
    assert re.search(r"could not diagnose 19: refused \(repeated 19 times in the last \d+\.\d\ds\)$", lines[2])
