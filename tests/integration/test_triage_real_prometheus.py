"""`diagnosd triage` end to end on the shipped rules and a real Prometheus with backfilled history:
the one injected fault shows first, the engine symptoms it can see are clear, the rest say why not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from diagnosd.cli import main
from diagnosd.promlocal import free_port
from diagnosd.promlocal.openmetrics import Series
from tests.conftest import StartPrometheus

AT = datetime(2026, 2, 1, 12, tzinfo=UTC)
PODS = ("vllm-0", "vllm-1", "vllm-2")
# Only the engine exporter: symptoms of GPU, gateway and Kubernetes series cannot be looked at.
TTFT = {"0.1": 50, "0.5": 90, "1.0": 100, "+Inf": 100}  # per minute, into each bucket (cumulative)
ITL = {"0.01": 500, "0.05": 950, "0.1": 1000, "+Inf": 1000}


def minutes() -> list[datetime]:
    """An hour a day before AT and the hour up to AT, one sample a minute."""
    day_ago = [AT - timedelta(days=1, minutes=m) for m in range(60, -1, -1)]
    return day_ago + [AT - timedelta(minutes=m) for m in range(60, -1, -1)]


def gauge(name: str, labels: dict[str, str], now: float, before: float) -> Series:
    return Series(name, labels, [(t.timestamp(), now if t > AT - timedelta(hours=2) else before) for t in minutes()])


def counter(name: str, labels: dict[str, str], per_minute: float) -> Series:
    start = minutes()[0]
    return Series(name, labels, [(t.timestamp(), per_minute * (t - start).total_seconds() / 60) for t in minutes()])


def fleet() -> list[Series]:
    """vllm-0's queue backs up on a full KV pool (the fault); otherwise the same as a day ago."""
    out: list[Series] = []
    for pod in PODS:
        labels = {"namespace": "prod", "pod": pod, "model_name": "llama"}
        faulty = pod == "vllm-0"
        out.append(gauge("vllm:num_requests_waiting", labels, 25 if faulty else 1, 1))
        out.append(gauge("vllm:kv_cache_usage_perc", labels, 0.97 if faulty else 0.4, 0.4))
        out.append(gauge("vllm:num_requests_running", labels, 8, 8))
        out.append(counter("vllm:prefix_cache_hits_total", labels, 800))
        out.append(counter("vllm:prefix_cache_queries_total", labels, 1000))
        out.append(counter("vllm:request_success_total", {**labels, "finished_reason": "stop"}, 100))
        for name, buckets in (("vllm:time_to_first_token_seconds", TTFT), ("vllm:inter_token_latency_seconds", ITL)):
            for le, per_minute in buckets.items():
                out.append(counter(f"{name}_bucket", {**labels, "le": le}, per_minute))
    return out


def triage(url: str, *args: str) -> list[str]:
    return ["triage", "--prometheus", url, "--at", AT.isoformat(), *args]


def test_the_fault_shows_first_and_the_rest_is_clear_or_says_why(
    start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prom = start_prometheus(fleet())
    assert main(triage(prom.url, "--format", "json")) == 4
    body = json.loads(capsys.readouterr().out)
    assert [p["symptom"] for p in body["present"]] == ["queue_backlog"]
    (hit,) = body["present"][0]["hits"]
    assert hit["labels"] == {"namespace": "prod", "pod": "vllm-0"}
    assert hit["cause"]["cause"] == "kv_pool_full"
    assert hit["evidence"]["value"] == 0.97
    clear = [c["symptom"] for c in body["clear"]]
    assert {"ttft_high", "tpot_high", "kv_hit_low"} <= set(clear)
    unknown = {u["symptom"]: u["reasons"] for u in body["unknown"]}
    assert len(clear) + len(unknown) == 19
    assert unknown["gpu_underutilized"][0]["reason"] == "exporter_absent"
    assert "dcgm-exporter" in unknown["gpu_underutilized"][0]["detail"]
    assert unknown["routing_imbalance"][0]["reason"] == "exporter_absent"
    assert all(reasons and all(r["reason"] and r["detail"] for r in reasons) for reasons in unknown.values())
    assert body["targets"] == 3

    assert main(triage(prom.url)) == 4
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[2] == "▲ queue_backlog [warning] — 1 of 3 targets: Queue length above 10 for a sustained period"
    assert lines[3].startswith("    namespace=prod pod=vllm-0 → kv_pool_full [warning] ")
    assert lines[4].startswith("        kv_pool_full: ")  # then describe(evidence), render/text.py's format
    assert "97" in lines[4]
    assert any(line.startswith("· clear (") and "ttft_high" in line for line in lines)
    assert any(line.startswith("? gpu_underutilized · ") and "exporter absent" in line for line in lines)


def test_a_healthy_scope_exits_0_and_no_baseline_is_not_clear(
    start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    # No history a day ago: every baseline-dependent symptom must say so, not clear.
    recent = [
        Series(s.name, s.labels, [p for p in s.points if p[0] > (AT - timedelta(hours=2)).timestamp()]) for s in fleet()
    ]
    prom = start_prometheus(recent)
    assert main(triage(prom.url, "--match", "pod=vllm-1", "--format", "json")) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["present"] == []
    assert "queue_backlog" in [c["symptom"] for c in body["clear"]]
    unknown = {u["symptom"]: u["reasons"] for u in body["unknown"]}
    for symptom in ("ttft_high", "tpot_high"):
        assert [r["reason"] for r in unknown[symptom]] == ["no_baseline"], unknown[symptom]
        assert symptom not in [c["symptom"] for c in body["clear"]]


def test_unreachable_prometheus_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(triage(f"http://127.0.0.1:{free_port()}")) == 3
    assert "Prometheus could not be used" in capsys.readouterr().err
