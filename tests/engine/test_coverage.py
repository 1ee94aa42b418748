"""Which queries can run given the metric names a Prometheus has."""

from __future__ import annotations

import promql_parser as pp
import pytest

from diagnosd.engine.coverage import runnable


@pytest.mark.parametrize(
    ("query", "have", "expected"),
    [
        ("rate(a[5m]) or rate(b[5m])", {"b"}, True),
        ("rate(a[5m]) or rate(b[5m])", set(), False),
        ("sum(a) / sum(b)", {"a"}, False),
        ("sum(a) / sum(b)", {"a", "b"}, True),
        ("a unless b", {"a"}, True),
        ("a and on() absent(b)", {"a"}, True),
        ("histogram_quantile(0.95, sum by (le) (rate(a_bucket[5m])))", {"a_bucket"}, True),
        ("max_over_time(a[30m:1m]) > 3", set(), False),
        ("(a or b) * on(x) group_left c", {"b", "c"}, True),
    ],
)
def test_runnable(query: str, have: set[str], expected: bool) -> None:
    assert runnable(pp.parse(query), have) is expected
