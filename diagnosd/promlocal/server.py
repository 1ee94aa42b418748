"""A real Prometheus on a loopback port, started and always stopped by its owner (tests, demo, drills, bench)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from diagnosd.promlocal.process import LocalServer, ServerProcess, executable, free_port


@dataclass
class LocalPrometheus(LocalServer):
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
    _process: ServerProcess | None = None

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
        self._process = ServerProcess("prometheus", self.workdir / "prometheus.log")
        self._process.start(command, f"{self.url}/-/ready", timeout)
