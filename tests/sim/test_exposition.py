"""The text the simulator serves: colon names intact, numbers printed the way each exporter prints them."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from diagnosd.sim.exporters import families
from diagnosd.sim.exposition import Collector, Family, Format, Kind, colon_free, go_float, go_g, histogram, number, text
from tests.sim.conftest import short


@pytest.mark.parametrize(
    "value", [0.0, 1.0, 0.001, 0.25, 7680.0, 100000.0, 1e6, 1100000.0, 8128902.0, 2.5e-7, 123456.789, -3.5, 1e21]
)
def test_go_float_is_prometheus_clients_own(value: float) -> None:
    assert go_float(value) == floatToGoString(value)


def test_go_float_spells_non_finite_values() -> None:
    assert [go_float(v) for v in (math.inf, -math.inf, math.nan)] == ["+Inf", "-Inf", "NaN"]


@pytest.mark.parametrize(
    ("value", "printed"),
    # Values copied from samples/kube-state-metrics and samples/node_exporter (Go's %g, shortest).
    [(1.5e9, "1.5e+09"), (1501569018.0, "1.501569018e+09"), (137.0, "137"), (0.2, "0.2"), (3e8, "3e+08"),
     (1.25e8, "1.25e+08"), (18527668.0, "1.8527668e+07"), (0.007, "0.007"), (819200.0, "819200"), (0.0, "0")],
)  # fmt: skip
def test_go_g_prints_like_client_golang_and_kube_state_metrics(value: float, printed: str) -> None:
    assert go_g(value) == printed


def test_dcgm_number_formats() -> None:
    assert number(300.0, Format.FIXED) == "300.000000"
    assert number(1980.0, Format.INT) == "1980"


def test_text_keeps_colons_types_and_escapes() -> None:
    out = Collector()
    out.family("vllm:num_requests_running", Kind.GAUGE, "Running.").add((("pod", 'a"b\\c\nd'),), 3.0)
    out.family("vllm:prompt_tokens_total", Kind.COUNTER, "Tokens.").add((("pod", "p"),), 1e6)
    body = text(out.families())
    assert '# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{pod="p"} 1e+06\n' in body
    assert 'vllm:num_requests_running{pod="a\\"b\\\\c\\nd"} 3.0\n' in body
    parsed = {f.name: f for f in text_string_to_metric_families(body)}
    assert parsed["vllm:num_requests_running"].samples[0].labels["pod"] == 'a"b\\c\nd'


def test_histogram_samples_are_cumulative_with_count_equal_to_inf_bucket() -> None:
    family = Family("vllm:time_to_first_token_seconds", Kind.HISTOGRAM, "TTFT.")
    histogram(family, (("pod", "p"),), (0.1, 1.0, math.inf), [2.7, 9.9, 10.2], 3.5)
    assert [(s.name, dict(s.labels).get("le"), s.value) for s in family.samples] == [
        ("vllm:time_to_first_token_seconds_bucket", "0.1", 2),
        ("vllm:time_to_first_token_seconds_bucket", "1.0", 9),
        ("vllm:time_to_first_token_seconds_bucket", "+Inf", 10),
        ("vllm:time_to_first_token_seconds_count", None, 10),
        ("vllm:time_to_first_token_seconds_sum", None, 3.5),
    ]


def test_a_collector_with_wanted_names_mutes_the_rest() -> None:
    out = Collector(frozenset({"vllm:time_to_first_token_seconds_bucket"}))
    wanted = out.family("vllm:time_to_first_token_seconds", Kind.HISTOGRAM, "h")
    other = out.family("vllm:num_requests_running", Kind.GAUGE, "g")
    histogram(wanted, (), (math.inf,), [1.0], 1.0)
    other.add((), 1.0)
    assert [f.name for f in out.families()] == ["vllm:time_to_first_token_seconds"]
    assert other.samples == []


def test_underscore_flavour_rewrites_only_colons() -> None:
    assert colon_free("vllm:num_requests_waiting", True) == "vllm_num_requests_waiting"
    assert colon_free("vllm:num_requests_waiting", False) == "vllm:num_requests_waiting"


def test_the_whole_fleet_parses_with_prometheus_client_and_keeps_colons() -> None:
    body = text(families(short("healthy")))
    parsed = list(text_string_to_metric_families(body))
    names = {s.name for f in parsed for s in f.samples}
    assert {"vllm:num_requests_waiting", "sglang:num_queue_reqs", "DCGM_FI_DEV_GPU_UTIL"} <= names
    assert "litellm_deployment_total_requests_total" in names
    assert not any(n.startswith(("vllm_", "sglang_")) for n in names)
    ttft = next(f for f in parsed if f.name == "vllm:time_to_first_token_seconds")
    assert ttft.type == "histogram"
