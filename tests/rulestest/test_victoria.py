"""The shipped rules' series tests on a real single-node VictoriaMetrics, and the known-differences
list that says which cases answer otherwise there (each must, and only those)."""

from __future__ import annotations

import socket
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from diagnosd.cli import main
from diagnosd.errors import ServerError
from diagnosd.promlocal.openmetrics import Series
from diagnosd.promlocal.victoria import LocalVictoriaMetrics, batches
from diagnosd.rulestest import differences
from diagnosd.rulestest.runner import CaseResult, collect, judge
from diagnosd.rulestest.stores import Backend
from tests.conftest import REPO, RULES

FIXTURE = REPO / "tests" / "fixtures" / "rules"
VM = Backend.VICTORIAMETRICS
# 2026-01-01T00:00:00Z, the series tests' epoch: far older than VictoriaMetrics' default retention.
EPOCH = 1767225600.0


@pytest.mark.slow
def test_every_shipped_case_answers_the_same_on_victoriametrics_or_is_a_known_difference() -> None:
    results = collect(RULES, backend=VM)
    cases = sum(len(yaml.safe_load(p.read_text())["tests"]) for p in RULES.glob("*.test.yaml"))
    assert len(results) == cases  # every case ran: none lost to the import or the retention
    failures = [f"{r.tree}: {r.name}: {f}" for r in results for f in r.failures]
    assert not failures, "\n".join(failures)
    known = {(r.tree, r.name) for r in results if r.differs is not None}
    assert known == set(differences.KNOWN[VM])


def test_rules_test_backend_flag_runs_on_victoriametrics(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "test", str(FIXTURE), "--backend", "victoriametrics"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "rules test on victoriametrics: 1 passed (0 known differences), 0 failed"
    )


def test_a_listed_case_that_differs_passes_with_its_reason_and_its_diff() -> None:
    failing = CaseResult("queue_backlog", "a", ["[pod=vllm-0] value of detect: want 6, got 30"])
    (result,) = judge([failing], {("queue_backlog", "a"): "no extrapolation"}, {"queue_backlog"}, VM)
    assert result.passed
    assert result.differs == "no extrapolation"
    assert result.differences == ["[pod=vllm-0] value of detect: want 6, got 30"]


def test_a_listed_case_that_passes_or_no_longer_exists_fails() -> None:
    known = {("queue_backlog", "a"): "no extrapolation", ("queue_backlog", "renamed"): "lookback"}
    results = judge([CaseResult("queue_backlog", "a")], known, {"queue_backlog"}, VM)
    assert [(r.name, r.failures) for r in results] == [
        ("a", ["listed as a known difference on victoriametrics (no extrapolation), but it passes: unlist it"]),
        ("renamed", ["listed as a known difference on victoriametrics, no such case"]),
    ]
    # A tree left out with --only is not run: its listed cases are not missing.
    assert judge([], known, {"ttft_high"}, VM) == []


def test_an_unlisted_case_that_fails_still_fails() -> None:
    (result,) = judge([CaseResult("ttft_high", "b", ["top cause: want x, got y"])], {}, {"ttft_high"}, VM)
    assert not result.passed
    assert result.differs is None


def test_series_are_imported_flushed_and_queryable_then_the_server_stops(tmp_path: Path) -> None:
    series = [
        Series("vllm:num_requests_waiting", {"pod": 'a"b\\c', "namespace": "prod"}, [(EPOCH, 1.0), (EPOCH + 60, 2.5)]),
        Series("vllm_gpu_cache_usage_perc", (("pod", "x"),), [(EPOCH + 60, float("inf"))]),
    ]
    with LocalVictoriaMetrics(tmp_path) as vm:
        vm.load(series)
        port = vm.port
        assert query(vm.url, 'vllm:num_requests_waiting{pod="a\\"b\\\\c"}', EPOCH + 60) == [("prod", "2.5")]
        assert query(vm.url, "vllm_gpu_cache_usage_perc", EPOCH + 60) == [(None, "+Inf")]
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0  # stopped: nothing listens there any more


def test_import_bodies_are_prometheus_text_with_millisecond_timestamps() -> None:
    many = Series("m", {"a": "b"}, [(EPOCH + i * 0.5, float(i)) for i in range(3)])
    assert b"".join(batches([many])).decode().splitlines() == [
        'm{a="b"} 0.0 1767225600000',
        'm{a="b"} 1.0 1767225600500',
        'm{a="b"} 2.0 1767225601000',
    ]


def test_a_missing_binary_names_the_debian_package(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="apt-get install victoria-metrics"):
        LocalVictoriaMetrics(tmp_path, binary="no-such-victoria-metrics").start()


def query(url: str, promql: str, at: float) -> list[tuple[str | None, str]]:
    import json

    form = urllib.parse.urlencode({"query": promql, "time": at}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=form, timeout=10) as response:
        body = json.load(response)
    return [(r["metric"].get("namespace"), r["value"][1]) for r in body["data"]["result"]]
