"""The one server runner under LocalPrometheus and LocalVictoriaMetrics, on a real Python HTTP server."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from diagnosd.errors import ServerError
from diagnosd.promlocal.process import ServerProcess, free_port


def test_it_returns_once_the_url_answers_and_stop_leaves_nothing_listening(tmp_path: Path) -> None:
    port = free_port()
    runner = ServerProcess("http.server", tmp_path / "server.log")
    command = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(tmp_path), str(port)]
    runner.start(command, f"http://127.0.0.1:{port}/")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # connected: it serves on the port it was given
    finally:
        runner.stop()
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    runner.stop()  # a second stop is a no-op, as `finally` blocks and `__exit__` need


def test_a_process_that_dies_is_named_with_its_exit_code_and_log_tail(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; print('bad flag -x'); sys.exit(3)"]
    with pytest.raises(ServerError, match=r"(?s)fake-server exited with 3:.*bad flag -x"):
        ServerProcess("fake-server", tmp_path / "fake.log").start(command, f"http://127.0.0.1:{free_port()}/")


def test_one_that_never_answers_is_stopped_and_named_with_its_log_tail(tmp_path: Path) -> None:
    # Alive but never listening: the deadline passes, the runner stops it and says so.
    command = [sys.executable, "-c", "import time; print('still loading', flush=True); time.sleep(60)"]
    runner = ServerProcess("slow-server", tmp_path / "slow.log")
    with pytest.raises(ServerError, match=r"(?s)slow-server not ready on .* after 1s:.*still loading"):
        runner.start(command, f"http://127.0.0.1:{free_port()}/", timeout=1.0)
    assert runner._process is None  # reaped, not left running behind the error
