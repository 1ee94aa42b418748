"""A real Prometheus on a loopback port, started and always stopped by its owner (tests, demo, drills, bench)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import yaml

from diagnosd.errors import ServerError


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalPrometheus:
    """`with LocalPrometheus(workdir) as prom:` → prom.url answers until the block ends."""

    workdir: Path
    tsdb: Path | None = None
    scrape: list[dict[str, object]] = field(default_factory=list)
    scrape_interval: str = "15s"
    query_log: Path | None = None
    rule_files: list[str] = field(default_factory=list)
    binary: str = "prometheus"
    port: int = 0
    extra_args: list[str] = field(default_factory=list)
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LocalPrometheus:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        body: dict[str, object] = {
            "global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
            "scrape_configs": self.scrape,
        }
        if self.rule_files:
            body["rule_files"] = self.rule_files
        if self.query_log is not None:
            body["global"] = {**body["global"], "query_log_file": str(self.query_log)}  # type: ignore[dict-item]
        config.write_text(yaml.safe_dump(body))
        self.port = self.port or free_port()
        command = [
            executable(self.binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={self.tsdb or self.workdir / 'data'}",
            # Retention counts from the newest block, not the wall clock: keep old test data.
            "--storage.tsdb.retention.time=10y",
            f"--web.listen-address=127.0.0.1:{self.port}",
            f"--web.external-url=http://127.0.0.1:{self.port}",
            *self.extra_args,
        ]
        log = (self.workdir / "prometheus.log").open("wb")  # after the binary is found: no open file left behind
        self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                tail = (self.workdir / "prometheus.log").read_text(errors="replace")[-2000:]
                raise ServerError(f"prometheus exited with {self._process.returncode}:\n{tail}")
            if ready(f"{self.url}/-/ready"):
                return
            time.sleep(0.05)
        self.stop()
        raise ServerError(f"prometheus not ready on {self.url} after {timeout:g}s")

    def stop(self) -> None:
        if self._process is None:
            return
        stop(self._process)
        self._process = None


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 10 s; always reaped."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def ready(url: str) -> bool:
    """Whether `url` answers 200 within a second: a local server's readiness probe."""
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def executable(name: str, package: str = "prometheus") -> str:
    """`name` resolved on PATH; a ServerError naming the Debian package when it is not there."""
    found = shutil.which(name)
    if found is None:
        raise ServerError(f"{name!r} not found on PATH (Debian: apt-get install {package})")
    return found
