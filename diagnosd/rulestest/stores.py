"""Where the series tests' samples are served from: a real Prometheus backfilled by promtool, or a
real single-node VictoriaMetrics fed over its import API. Both answer the Prometheus query API the
diagnosis then reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from diagnosd.promlocal import LocalPrometheus, LocalVictoriaMetrics, backfill, executable
from diagnosd.promlocal.openmetrics import Series, write


class Backend(StrEnum):
    PROMETHEUS = "prometheus"
    VICTORIAMETRICS = "victoriametrics"


@dataclass(frozen=True)
class Binaries:
    prometheus: str = "prometheus"
    promtool: str = "promtool"
    victoria_metrics: str = "victoria-metrics"

    def check(self, backend: Backend) -> Binaries:
        """The binaries resolved on PATH: a missing one is known before any series is built."""
        if backend is Backend.VICTORIAMETRICS:
            return Binaries(self.prometheus, self.promtool, executable(self.victoria_metrics, "victoria-metrics"))
        promtool = executable(self.promtool)
        return Binaries(executable(self.prometheus), promtool, self.victoria_metrics)


@contextmanager
def serving(backend: Backend, series: Sequence[Series], work: Path, binaries: Binaries) -> Iterator[str]:
    """The URL of a store holding `series`, until the block ends; the store is always stopped."""
    if backend is Backend.VICTORIAMETRICS:
        with LocalVictoriaMetrics(work / "victoria-metrics", binary=binaries.victoria_metrics) as vm:
            vm.load(series)
            yield vm.url
        return
    with (work / "series.om").open("w") as out:
        write(out, series)
    backfill(work / "series.om", work / "tsdb", binaries.promtool)
    with LocalPrometheus(work, tsdb=work / "tsdb", binary=binaries.prometheus) as prom:
        yield prom.url
