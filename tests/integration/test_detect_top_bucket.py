"""A detect whose quantile lies beyond the histogram's last finite bucket is shown as a lower bound.

Prometheus answers a p95 in the +Inf bucket with the largest finite bound (640 s for vLLM's TTFT
histogram): "10.7 min" would read as a measurement; "≥ 10.7 min (top bucket)" says what it is.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diagnosd.cli import main
from diagnosd.promlocal.openmetrics import Series
from tests.conftest import StartPrometheus

AT = datetime(2026, 2, 1, 12, tzinfo=UTC)
BOUNDS = ("0.5", "640", "+Inf")


def ttft(pod: str, per_minute: dict[str, float], around: datetime) -> list[Series]:
    """Cumulative TTFT buckets of one pod, a sample a minute for the 20 minutes up to `around`."""
    minutes = [around - timedelta(minutes=m) for m in range(20, -1, -1)]
    labels = {"namespace": "prod", "pod": pod}
    return [
        Series(
            "vllm:time_to_first_token_seconds_bucket",
            {**labels, "le": le},
            [(t.timestamp(), per_minute[le] * i) for i, t in enumerate(minutes)],
        )
        for le in BOUNDS
    ]


def history() -> list[Series]:
    fast = {"0.5": 10, "640": 10, "+Inf": 10}  # yesterday: every first token within 0.5 s
    stuck = {"0.5": 0, "640": 0, "+Inf": 10}  # now: every first token later than 640 s
    by_name: dict[tuple[str, tuple[tuple[str, str], ...]], Series] = {}
    for series in ttft("vllm-0", fast, AT - timedelta(days=1)) + ttft("vllm-0", stuck, AT):
        key = (series.name, tuple(sorted(series.labels.items())))
        if key in by_name:
            # One counter across the day: today's counts continue yesterday's.
            last = by_name[key].points[-1][1]
            series = Series(series.name, series.labels, [(t, last + v) for t, v in series.points])
            by_name[key] = Series(series.name, series.labels, by_name[key].points + series.points)
        else:
            by_name[key] = series
    return list(by_name.values())


def test_a_ttft_p95_beyond_the_last_bucket_reads_as_at_least_that_bound(
    start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prom = start_prometheus(history())
    assert main(["diagnose", "ttft_high", "--prometheus", prom.url, "--at", AT.isoformat()]) == 0
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("namespace=prod pod=vllm-0")]
    assert "SYMPTOM PRESENT" in line, out
    assert "≥ 10.7 min (top bucket)" in line, line
