"""`diagnosd watch` for real: a local Prometheus scrapes a simulated fleet and a bare engine endpoint,
the board names what it sees, baseline checks say "no baseline yet", and nothing is left behind."""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest

from diagnosd.cli.triage import endpoint, scrape_configs
from diagnosd.sim import scenario
from diagnosd.sim.server import MetricsServer
from diagnosd.sim.simulator import Simulator

# What a bare vLLM serves: no namespace, no pod. Its queue is long.
BARE = b'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 50\n'


@contextmanager
def bare_engine() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(BARE)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics"
    finally:
        httpd.shutdown()
        httpd.server_close()


def live() -> Simulator:
    anchor = float(math.floor(time.time()))
    sim = Simulator(scenario.load("kv_pool_full"), anchor=anchor, history=3600.0, coarse=900.0)
    sim.run(anchor)
    return sim


def watch(tmp_path: Path, *urls: str, extra: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    # Rates need two scrapes: a warm-up of a few scrape intervals (the simulator's /metrics is 2 MB).
    # TMPDIR: the temporary TSDB lands under tmp_path, so the test can see it removed.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "diagnosd", "watch", "--scrape", *urls, *extra]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def left_behind(tmp_path: Path) -> list[str]:
    """Processes whose command line names tmp_path (the watch's Prometheus), and leftover TSDB dirs."""
    found = [str(p) for p in tmp_path.glob("diagnosd-watch-*")]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(tmp_path) in cmdline and "prometheus" in cmdline:
            found.append(f"{proc.name}: {cmdline}")
    return found


def test_scraped_targets_get_namespace_and_pod_labels() -> None:
    (job,) = scrape_configs([endpoint("127.0.0.1:8000"), endpoint("http://[::1]:9000/metrics")], 5)
    assert job["honor_labels"] is True
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"] == [
        {"targets": ["127.0.0.1:8000"], "labels": {"namespace": "local", "pod": "127.0.0.1:8000"}},
        {"targets": ["[::1]:9000"], "labels": {"namespace": "local", "pod": "[::1]:9000"}},
    ]


def test_watch_once_on_a_young_tsdb_judges_nothing_it_cannot_see(tmp_path: Path) -> None:
    """Ten seconds after Prometheus started, every window-based detect is "not enough history yet"
    (a 10m rate over 10 s of samples is a fortieth of the truth: low QPS everywhere) and every
    baseline-based one "no baseline yet": no symptom is claimed, none is cleared, exit 3."""
    sim = live()
    with MetricsServer(sim) as server, bare_engine() as bare:
        process = watch(tmp_path, server.url, bare, extra=("--once", "--warmup", "10", "--scrape-interval", "2"))
        out, err = process.communicate(timeout=180)
    assert process.returncode == 3, err
    assert not [line for line in out.splitlines() if line.startswith(("▲ ", "· clear"))], out
    port = bare.split(":")[2].split("/")[0]
    assert f"127.0.0.1:{port} up" in out.splitlines()[-2]  # scraped: ... (below the board)
    lines = {line.split(" · ")[0]: line for line in out.splitlines() if line.startswith("? ")}
    for symptom in ("ttft_high", "tpot_high"):
        assert "no baseline yet" in lines[f"? {symptom}"], out
    for symptom in ("queue_backlog", "memory_high_qps_low", "kv_hit_low"):
        assert "not enough history yet" in lines[f"? {symptom}"], out
        assert "of history; this query reads" in lines[f"? {symptom}"], out
    assert left_behind(tmp_path) == []


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 0)])
def test_a_signal_stops_everything_it_started(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    with bare_engine() as bare:
        process = watch(tmp_path, bare, extra=("--warmup", "1", "--interval", "1", "--scrape-interval", "1"))
        try:
            assert _wait_for_board(process, 60), "no board within 60 s"
            assert list(tmp_path.glob("diagnosd-watch-*"))  # the temporary TSDB exists while it runs
            process.send_signal(sig)
            _, err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate()
    assert process.returncode == code, err
    assert left_behind(tmp_path) == []


def _wait_for_board(process: subprocess.Popen[str], timeout: float) -> bool:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            line = process.stdout.readline()
            if line.startswith("diagnosd triage @"):
                return True
            if not line and process.poll() is not None:
                return False
    return False
