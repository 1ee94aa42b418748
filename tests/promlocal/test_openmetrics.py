"""The one OpenMetrics writer: what promtool reads back, for both label shapes and odd values."""

from __future__ import annotations

import io
import json
import math
import urllib.parse
import urllib.request

from diagnosd.promlocal.openmetrics import Series, value, write
from tests.conftest import StartPrometheus


def test_series_group_by_name_labels_mapping_sorted_pairs_in_order_and_eof_last() -> None:
    out = io.StringIO()
    written = write(
        out,
        [
            Series("b", {"z": "1", "a": 'q"\\\n'}, [(10.0, 1.0)]),
            Series("a", (("z", "1"), ("a", "2")), zip([10.0, 20.0], [0.5, 2.0], strict=True)),
            Series("b", {}, [(10.0, 3.0)]),
        ],
    )
    assert written == 4
    assert out.getvalue().splitlines() == [
        'a{z="1",a="2"} 0.5 10.000',
        'a{z="1",a="2"} 2.0 20.000',
        'b{a="q\\"\\\\\\n",z="1"} 1.0 10.000',
        "b 3.0 10.000",
        "# EOF",
    ]


def test_end_false_leaves_the_file_open_for_more() -> None:
    out = io.StringIO()
    write(out, [Series("a", {}, [(1.0, 1.0)])], end=False)
    assert "# EOF" not in out.getvalue()


def test_non_finite_values_use_the_openmetrics_spelling() -> None:
    assert [value(v) for v in (math.inf, -math.inf, math.nan, 1e-300, 3)] == ["+Inf", "-Inf", "NaN", "1e-300", "3.0"]


def test_promtool_reads_back_exactly_what_was_written(start_prometheus: StartPrometheus) -> None:
    odd = 'say "hi"\\ now'
    prom = start_prometheus(
        [Series("drill_value", {"pod": odd}, [(1_700_000_000.0 + 60 * i, 0.1 * i) for i in range(10)])]
    )
    query = urllib.parse.urlencode({"query": "drill_value", "time": "1700000540"})
    with urllib.request.urlopen(f"{prom.url}/api/v1/query?{query}", timeout=10) as response:
        [sample] = json.load(response)["data"]["result"]
    assert sample["metric"]["pod"] == odd
    assert float(sample["value"][1]) == 0.1 * 9
