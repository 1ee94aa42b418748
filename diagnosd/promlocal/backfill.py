"""promtool's backfill of an OpenMetrics file, in one block instead of one per two hours.

`promtool tsdb create-blocks-from openmetrics` reads its whole input once per block it cuts; a
day of history in 2 h blocks means 13 passes. `--max-block-duration` (accepted, though hidden,
by promtool 2.42) lets it cut one block, which Prometheus loads like any other.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

from diagnosd.errors import ServerError
from diagnosd.promlocal.process import executable


def backfill(openmetrics: Path, tsdb: Path, promtool: str = "promtool", span_hours: float = 192.0) -> None:
    """Turn `openmetrics` into TSDB blocks under `tsdb`; run it before Prometheus starts."""
    tool = executable(promtool)
    hours = 2 * math.ceil(span_hours / 2)
    done = subprocess.run(
        [
            tool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            f"--max-block-duration={hours}h",
            str(openmetrics),
            str(tsdb),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        detail = done.stderr.strip() or done.stdout.strip()
        raise ServerError(f"promtool backfill of {openmetrics} failed ({done.returncode}): {detail[-2000:]}")
