"""One local server process: a binary on a free loopback port, its output in a log file, ready once a URL
answers, always stopped. The runner under `LocalPrometheus` and `LocalVictoriaMetrics`, and the face
(`LocalServer`: url, `with`, stop) both show their owners."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from diagnosd.errors import ServerError

# How much of the log an error carries: the last lines are the ones that say why.
TAIL_CHARS = 2000


@dataclass
class ServerProcess:
    """`start` returns once `ready_url` answers 200; otherwise a ServerError naming `name` with the log tail."""

    name: str
    log: Path
    _process: subprocess.Popen[bytes] | None = None

    def start(self, command: list[str], ready_url: str, timeout: float = 30.0) -> None:
        # The caller resolved the binary before this: a missing one leaves no log file open behind it.
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self._process.poll()
            if code is not None:
                self._process = None
                raise ServerError(f"{self.name} exited with {code}:\n{self.log_tail()}")
            if ready(ready_url):
                return
            time.sleep(0.05)
        self.stop()
        raise ServerError(f"{self.name} not ready on {ready_url} after {timeout:g}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        if self._process is None:
            return
        stop(self._process)
        self._process = None

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-TAIL_CHARS:]


class LocalServer:
    """What both local servers show their owner: the URL, `with`, and stop; each starts its own way."""

    port: int
    _process: ServerProcess | None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (a benchmark renices it, say)."""
        return None if self._process is None else self._process.pid

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
