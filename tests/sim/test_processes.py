"""The commands as users run them: Ctrl-C stops everything the demo started; simulate serves and stops."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from diagnosd.promlocal import free_port


def _read_until(process: subprocess.Popen[str], marker: str, timeout: float) -> str:
    assert process.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        assert time.monotonic() < deadline, f"no {marker!r} within {timeout:g}s; output so far:\n{seen}"
        line = process.stdout.readline()
        assert line or process.poll() is None, f"exited early:\n{seen}"
        seen += line
    return seen


def _closed(url: str) -> bool:
    found = re.match(r"http://([\d.]+):(\d+)", url)
    assert found is not None
    with socket.socket() as sock:
        return sock.connect_ex((found.group(1), int(found.group(2)))) != 0


def test_ctrl_c_stops_the_demo_and_everything_it_started(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "diagnosd", "demo", "--scenario", "kv_pool_full", "--history", "2h"]
    command += ["--workdir", str(tmp_path / "demo")]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        try:
            out = _read_until(process, "Press Ctrl-C", timeout=60)
            prometheus = re.search(r"Prometheus: (http://\S+)/graph", out)
            simulator = re.search(r"simulator: (http://\S+)", out)
            daemon = re.search(r"diagnosd: (http://\S+)/docs", out)
            assert prometheus is not None
            assert simulator is not None
            assert daemon is not None
            assert httpx.get(f"{prometheus.group(1)}/-/ready", timeout=5).status_code == 200
            assert httpx.get(f"{daemon.group(1)}/readyz", timeout=5).status_code == 200
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=20) == 0
        finally:
            if process.poll() is None:
                process.kill()
    assert _closed(prometheus.group(1)), "Prometheus still listening after Ctrl-C"
    assert _closed(simulator.group(1)), "the simulator still listening after Ctrl-C"
    assert _closed(daemon.group(1)), "diagnosd serve still listening after Ctrl-C"


def test_simulate_serves_on_loopback_and_stops_on_sigterm() -> None:
    port = free_port()
    command = [sys.executable, "-m", "diagnosd", "simulate", "--history", "1h", "--port", str(port)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        try:
            _read_until(process, "serving healthy on http://127.0.0.1:", timeout=30)
            body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            assert "vllm:num_requests_running{" in body
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_simulate_on_a_taken_port_says_so(capsys: object) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        command = [sys.executable, "-m", "diagnosd", "simulate", "--history", "1h", "--port", str(port)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
