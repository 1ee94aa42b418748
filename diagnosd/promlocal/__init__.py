"""A local Prometheus toolkit: start one on a free loopback port and always stop it (server),
backfill it with promtool (backfill), and the one OpenMetrics writer (openmetrics); its sibling,
a single-node VictoriaMetrics fed over its import API (victoria); both run on one process runner
(process). Series tests, the demo,
`triage --simulate`, the drills, the benchmarks and the tests all use it."""

from diagnosd.promlocal.backfill import backfill
from diagnosd.promlocal.process import executable, free_port, stop
from diagnosd.promlocal.server import LocalPrometheus
from diagnosd.promlocal.victoria import LocalVictoriaMetrics

__all__ = ["LocalPrometheus", "LocalVictoriaMetrics", "backfill", "executable", "free_port", "stop"]
