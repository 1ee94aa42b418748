"""A local Prometheus toolkit: start one on a free loopback port and always stop it (server),
backfill it with promtool (backfill), and the one OpenMetrics writer (openmetrics). Series
tests, the demo, `triage --simulate`, the drills, the benchmarks and the tests all use it."""

from diagnosd.promlocal.backfill import backfill
from diagnosd.promlocal.server import LocalPrometheus, free_port, stop

__all__ = ["LocalPrometheus", "backfill", "free_port", "stop"]
