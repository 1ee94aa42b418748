"""Review of 9153b2d (the daemon's logging written behind by a thread of its own; SIGTERM drains it):
nothing logged is lost (at exit, on SIGINT, on SIGTERM before and after uvicorn serves, while a
drain runs), floods are still one line and a count per template, uvicorn's access lines are still
redacted, and the block leaves the caller's logging as it found it."""

from __future__ import annotations

import io
import logging
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from diagnosd.api.auth import RedactQueries
from diagnosd.logs import NOISY, writing_behind
from diagnosd.promlocal import free_port

REPO = Path(__file__).resolve().parents[1]


class Gated(io.StringIO):
    """A stream whose writes wait for `open` (3 s at most): stderr as a pipe drained late."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()
        self.writing = threading.Event()

    def write(self, text: str) -> int:
        self.writing.set()
        self.open.wait(timeout=3)
        return super().write(text)


def wait(condition: Callable[[], bool], what: str, seconds: float = 3) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def run(script: str, timeout: float = 8) -> subprocess.CompletedProcess[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"still running after {timeout}s (hung); stderr so far:\n{err}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.fixture
def logger() -> logging.Logger:
    return logging.getLogger("diagnosd.test.review")


# -- in process -------------------------------------------------------------------------------


def test_a_record_logged_by_another_thread_while_a_drain_waits_for_the_writer_is_written_in_order(
    logger: logging.Logger,
) -> None:
    stream = Gated()
    with writing_behind("INFO", stream) as drain:
        logger.info("one")
        wait(stream.writing.is_set, "the writer to take the first line")
        drainer = threading.Thread(target=drain)
        drainer.start()
        other = threading.Thread(target=logger.info, args=("two",))  # waits for the drain, then written
        other.start()
        time.sleep(0.05)
        stream.open.set()
        for thread in (drainer, other):
            thread.join(5)
            assert not thread.is_alive()
        logger.info("three")
    assert [line.split(": ", 1)[1] for line in stream.getvalue().splitlines()] == ["one", "two", "three"]


def test_drain_summarises_the_open_windows(logger: logging.Logger) -> None:
    # drain is what runs before the process ends by SIGTERM (no `finally` follows): a flood's count
    # must be written by then.
    stream = io.StringIO()
    with writing_behind("INFO", stream) as drain:
        for n in range(5):
            logger.warning("prometheus down %d", n)
        drain()
        text = stream.getvalue()
    assert "prometheus down 4 (repeated 4 times in the last" in text


def test_the_block_leaves_the_noisy_loggers_as_it_found_them() -> None:
    noisy = [logging.getLogger(name) for name in NOISY]
    before = [one.level for one in noisy]
    try:
        for one in noisy:
            one.setLevel(logging.NOTSET)
        with writing_behind("INFO", io.StringIO()):
            assert all(one.level == logging.WARNING for one in noisy)
        assert [one.level for one in noisy] == [logging.NOTSET] * len(noisy)
    finally:
        for one, level in zip(noisy, before, strict=True):
            one.setLevel(level)


def test_floods_of_two_templates_interleaved_are_each_one_line_and_a_count(logger: logging.Logger) -> None:
    stream = io.StringIO()
    with writing_behind("INFO", stream):
        for n in range(6):
            logger.warning("delivery %d refused", n)
            logger.warning("round %d failed: %s", n, "timeout")
    # The span is the wall clock's between the first and last repeat: on a loaded machine it can
    # read 0.01s as well as 0.00s, so only its shape is held.
    lines = [
        re.sub(r"in the last \d+\.\d\ds\)$", "in the last Ns)", line.split(": ", 1)[1])
        for line in stream.getvalue().splitlines()
    ]
    assert lines[:2] == ["delivery 0 refused", "round 0 failed: timeout"]
    assert sorted(lines[2:]) == [
        "delivery 5 refused (repeated 5 times in the last Ns)",
        "round 5 failed: timeout (repeated 5 times in the last Ns)",
    ]


def test_extra_stack_info_and_uvicorn_s_color_message_are_written_once_and_plain(logger: logging.Logger) -> None:
    stream = io.StringIO()
    with writing_behind("INFO", stream):
        logging.getLogger("uvicorn.error").info(
            "Started server process [%d]", 42, extra={"color_message": "Started server process [\x1b[36m%d\x1b[0m]"}
        )
        logger.info("with a stack", stack_info=True, extra={"alert": "fp-1"})
    text = stream.getvalue()
    assert "INFO uvicorn.error: Started server process [42]\n" in text
    assert "\x1b[" not in text
    assert text.count("Stack (most recent call last):") == 1


def test_access_lines_are_redacted_before_they_are_queued() -> None:
    access = logging.getLogger("uvicorn.access")
    redact = RedactQueries()
    access.addFilter(redact)
    stream = io.StringIO()
    try:
        with writing_behind("INFO", stream):
            access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/findings?access_token=s3cret", "1.1", 401)
    finally:
        access.removeFilter(redact)
    assert '"GET /findings?[redacted] HTTP/1.1" 401' in stream.getvalue()
    assert "s3cret" not in stream.getvalue()


def test_an_interrupt_inside_the_block_still_writes_what_is_queued(logger: logging.Logger) -> None:
    stream = Gated()
    root = logging.getLogger()
    before = root.level, root.handlers[:]
    interrupted = False
    try:
        with writing_behind("INFO", stream):
            logger.info("queued before ^C")
            stream.open.set()
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
    assert interrupted
    assert stream.getvalue().endswith("diagnosd.test.review: queued before ^C\n")
    assert (root.level, root.handlers) == before


# -- as a process ends by a signal ------------------------------------------------------------

PRELUDE = """
import logging, os, signal, sys, threading, time
from diagnosd.cli.serve import _drained_on_sigterm
from diagnosd.logs import writing_behind
log = logging.getLogger("diagnosd.review")
"""


def test_sigterm_before_serving_writes_what_is_queued_and_ends_by_the_signal() -> None:
    done = run(
        PRELUDE
        + """
with writing_behind("INFO") as drain, _drained_on_sigterm(drain):
    for n in range(200):
        log.info("line %d", n)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
print("not reached")
"""
    )
    assert done.returncode == -signal.SIGTERM
    assert "not reached" not in done.stdout
    assert [line.split(": ", 1)[1] for line in done.stderr.splitlines()] == [f"line {n}" for n in range(200)]


def test_sigterm_writes_a_flood_s_count_before_the_process_ends() -> None:
    done = run(
        PRELUDE
        + """
with writing_behind("INFO") as drain, _drained_on_sigterm(drain):
    for n in range(5):
        log.warning("prometheus down %d", n)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
"""
    )
    assert done.returncode == -signal.SIGTERM
    assert "prometheus down 0" in done.stderr
    assert "prometheus down 4 (repeated 4 times in the last" in done.stderr


def test_sigterm_while_the_exit_drain_waits_for_a_slow_stream_still_ends_the_process() -> None:
    # Exiting on its own (an error, --check, ^C) with stderr drained late: the drain in `finally`
    # waits for the writer, and SIGTERM (docker stop, the kubelet) comes meanwhile.
    done = run(
        PRELUDE
        + """
class Slow:
    def write(self, text):
        time.sleep(1)
        return sys.stderr.write(text)
    def flush(self):
        sys.stderr.flush()

threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
with writing_behind("INFO", Slow()) as drain, _drained_on_sigterm(drain):
    log.info("last words")
    drain()
""",
        timeout=4,
    )
    assert done.returncode == -signal.SIGTERM
    assert "last words" in done.stderr


def test_uvicorn_s_graceful_shutdown_is_written_then_the_process_ends_by_sigterm() -> None:
    port = free_port()
    script = (
        PRELUDE
        + f"""
import uvicorn
from diagnosd.api.auth import RedactQueries

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({{"type": message["type"] + ".complete"}})
            if message["type"] == "lifespan.shutdown":
                return
    await send({{"type": "http.response.start", "status": 204, "headers": []}})
    await send({{"type": "http.response.body", "body": b""}})

with writing_behind("INFO") as drain, _drained_on_sigterm(drain):
    logging.getLogger("uvicorn.access").addFilter(RedactQueries())
    uvicorn.run(app, host="127.0.0.1", port={port}, log_config=None, log_level="info", server_header=False)
print("not reached")
"""
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:

        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/findings?access_token=s3cret", timeout=1).status_code == 204
            except httpx.HTTPError:
                assert process.poll() is None, "uvicorn ended before it answered"
                return False

        wait(answers, "uvicorn to answer", seconds=8)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=8)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == -signal.SIGTERM
    assert "not reached" not in out
    assert '"GET /findings?[redacted] HTTP/1.1" 204' in err
    assert "s3cret" not in err
    assert "INFO uvicorn.error: Started server process [" in err
    assert err.rstrip().endswith("Finished server process [" + str(process.pid) + "]")
