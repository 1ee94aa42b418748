"""A real single-node VictoriaMetrics on a loopback port, fed over its import API, always stopped by its owner.

The sibling of `LocalPrometheus` for the series tests' second store: the same series, written as
Prometheus text with millisecond timestamps, posted to `/api/v1/import/prometheus`, then flushed
so that the next query sees all of them.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from diagnosd.errors import ServerError
from diagnosd.promlocal.openmetrics import Series, escape, value
from diagnosd.promlocal.process import LocalServer, ServerProcess, executable, free_port

# One import request carries at most this many bytes: large enough to be few, small enough to stream.
BATCH_BYTES = 4 << 20


@dataclass
class LocalVictoriaMetrics(LocalServer):
    """`with LocalVictoriaMetrics(workdir) as vm:` → vm.url answers the Prometheus query API until the block ends."""

    workdir: Path
    binary: str = "victoria-metrics"
    port: int = 0
    # Samples older than now minus the retention are dropped at import: the series tests sit in 2026.
    retention: str = "100y"
    extra_args: list[str] = field(default_factory=list)
    _process: ServerProcess | None = None

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        command = [
            executable(self.binary, "victoria-metrics"),
            f"-storageDataPath={self.workdir / 'vm-data'}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-retentionPeriod={self.retention}",
            # Queries are about the past: no hiding of the newest 30 s, no result cache over an import.
            "-search.latencyOffset=0s",
            "-search.disableCache",
            # Every sample the test wrote stays; deduplication would thin denser series.
            "-dedup.minScrapeInterval=0s",
            *self.extra_args,
        ]
        self._process = ServerProcess("victoria-metrics", self.workdir / "victoria-metrics.log")
        self._process.start(command, f"{self.url}/health", timeout)

    def load(self, series: Iterable[Series]) -> None:
        """Import every series, then flush, so that queries see every sample written."""
        for body in batches(series):
            self._post("/api/v1/import/prometheus", body)
        self._post("/internal/force_flush", None)

    def _post(self, path: str, body: bytes | None) -> None:
        method = "POST" if body is not None else "GET"
        request = urllib.request.Request(f"{self.url}{path}", data=body, method=method)
        try:
            with urllib.request.urlopen(request, timeout=60.0) as response:
                response.read()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")[-2000:]
            raise ServerError(f"victoria-metrics {path} answered {error.code}: {detail}") from None
        except OSError as error:
            tail = self._process.log_tail() if self._process is not None else ""
            raise ServerError(f"victoria-metrics {path} failed: {error}\n{tail}") from None


def batches(series: Iterable[Series]) -> Iterator[bytes]:
    """The series as Prometheus text lines (`name{labels} value ms`), cut into bodies of about BATCH_BYTES."""
    chunk: list[str] = []
    size = 0
    for one in series:
        labels = one.labels if isinstance(one.labels, tuple) else tuple(sorted(one.labels.items()))
        head = one.name + ("{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels) + "}" if labels else "") + " "
        for t, v in one.points:
            line = f"{head}{value(v)} {round(t * 1000)}\n"
            chunk.append(line)
            size += len(line)
            if size >= BATCH_BYTES:
                yield "".join(chunk).encode()
                chunk, size = [], 0
    if chunk:
        yield "".join(chunk).encode()
