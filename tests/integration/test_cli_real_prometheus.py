"""`diagnosd diagnose` end to end on a real Prometheus with backfilled history."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from diagnosd.cli import main
from diagnosd.engine.rewrite import REGEX_SPECIAL
from diagnosd.promlocal.openmetrics import Series
from tests.conftest import REPO, StartPrometheus

RULES = str(REPO / "tests" / "fixtures" / "rules")
AT = datetime(2026, 2, 1, 12, tzinfo=UTC)
HOSTILE = ['"', "}", '"} or vector(1) #', "line\nbreak", "ünïcødé ☃", "\\"]


def flat(name: str, labels: dict[str, str], now: float, day_ago: float) -> Series:
    """An hour of samples a day before AT and an hour up to AT, one a minute."""
    points = [((AT - timedelta(days=1, minutes=m)).timestamp(), day_ago) for m in range(60, -1, -1)]
    points += [((AT - timedelta(minutes=m)).timestamp(), now) for m in range(60, -1, -1)]
    return Series(name, labels, points)


def fleet() -> list[Series]:
    series = []
    for pod, waiting, kv in (("vllm-0", 25, 0.97), ("vllm-1", 1, 0.4)):
        labels = {"namespace": "prod", "pod": pod, "model_name": "llama"}
        series.append(flat("vllm:num_requests_waiting", labels, waiting, 1))
        series.append(flat("vllm:kv_cache_usage_perc", labels, kv, 0.4))
    # Underscore-stored names (prometheus-client 0.23+ escaping) on a third pod.
    labels = {"namespace": "prod", "pod": "vllm-2", "model_name": "llama"}
    series.append(flat("vllm_num_requests_waiting", labels, 30, 1))
    series.append(flat("vllm_kv_cache_usage_perc", labels, 0.99, 0.4))
    return series


def diagnose(url: str, *args: str) -> list[str]:
    return ["--rules", RULES, "diagnose", "queue_backlog", "--prometheus", url, "--at", AT.isoformat(), *args]


def test_text_tree_names_the_cause_per_target(
    start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prom = start_prometheus(fleet())
    assert main(diagnose(prom.url)) == 0
    out = capsys.readouterr().out
    assert "2 of 3 targets have the symptom, 1 does not, 0 unknown" in out
    assert "namespace=prod pod=vllm-0 — SYMPTOM PRESENT: Waiting requests  25 (threshold > 10)" in out
    assert "├─ ▲ KV cache usage  0.97 (threshold > 0.9)" in out
    assert "│  └─ ▲ higher than yesterday  0.97 vs baseline 0.4 = ×2.42 (threshold > ×1.2)" in out
    assert "  · namespace=prod pod=vllm-1  1 (threshold > 10)" in out  # without the symptom: one line
    assert "namespace=prod pod=vllm-2 — SYMPTOM PRESENT" in out
    assert out.count("1. kv_pool_full [warning] KV pool nearly full") == 2
    assert main(diagnose(prom.url, "--verbose")) == 0
    assert "namespace=prod pod=vllm-1 — symptom not present" in capsys.readouterr().out


def test_json_contract(start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]) -> None:
    prom = start_prometheus(fleet())
    assert main(diagnose(prom.url, "--format", "json", "--match", "pod=vllm-0")) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["symptom"] == "queue_backlog"
    assert body["evaluated_at"] == "2026-02-01T12:00:00Z"
    (target,) = body["targets"]
    assert target["labels"] == {"namespace": "prod", "pod": "vllm-0"}
    assert target["symptom_present"] is True
    (cause,) = target["root_causes"]
    assert cause["cause"] == "kv_pool_full"
    assert [e["check"] for e in cause["evidence"]] == ["kv_pool_full"]
    assert cause["evidence"][0]["value"] == 0.97
    assert cause["evidence"][0]["threshold"] == 0.9
    checks = {c["id"]: c for c in target["checks"]}
    assert checks["kv_growth"]["verdict"] == "matched"
    assert checks["kv_growth"]["baseline"] == 0.4
    assert checks["requests_not_released"]["verdict"] == "manual"


def test_zh_rendering(start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]) -> None:
    prom = start_prometheus(fleet())
    assert main(diagnose(prom.url, "--lang", "zh", "--match", "pod=vllm-0")) == 0
    out = capsys.readouterr().out
    assert "├─ ▲ 检查 KV Cache 使用率  0.97" in out
    assert "→ KV 池子快满" in out


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_scope_cannot_change_the_query(
    value: str, start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prom = start_prometheus(fleet(), query_log=True)
    assert (
        main(diagnose(prom.url, "--format", "json", "--match", f"pod={value}", "--match", f"model_name={value}")) == 0
    )
    assert json.loads(capsys.readouterr().out)["targets"] == []
    assert prom.query_log is not None
    logged = [json.loads(line)["params"]["query"] for line in prom.query_log.read_text().splitlines()]
    assert logged, "Prometheus logged no query"
    regex = "".join("\\" + c if c in REGEX_SPECIAL else c for c in value) + "|"
    literal = json.dumps(regex, ensure_ascii=False)
    for query in logged:
        # Every selector (one per present spelling) carries the value as one escaped literal, and
        # nothing else was added.
        assert query.count(f"pod=~{literal}") == query.count("{") >= 1, query
        assert "vector(1)" not in query.replace(literal, "")


def test_unreachable_prometheus_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    from diagnosd.promlocal import free_port

    assert main(diagnose(f"http://127.0.0.1:{free_port()}", "--timeout", "2")) == 3
    assert "Prometheus could not be used: cannot reach Prometheus" in capsys.readouterr().err


def test_unknown_symptom_exits_2_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rules", RULES, "diagnose", "nope", "--prometheus", "http://127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.strip() == "diagnosd: unknown symptom 'nope'; known symptoms: queue_backlog"


def test_symptoms_lists_trees(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--rules", RULES, "symptoms", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {
            "id": "queue_backlog",
            "title": {"en": "Queue length above 10, sustained", "zh": "Queue Length 持续 > 10"},
            "target": ["namespace", "pod"],
        }
    ]


def test_rules_validate_reports_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "validate", RULES]) == 0
    assert main(["rules", "validate", str(tmp_path)]) == 1
    assert f"{tmp_path / 'catalog.yaml'}: catalog file is missing" in capsys.readouterr().err


def test_rules_coverage_reports_spellings_and_gaps(
    start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    now = datetime.now(UTC)
    recent = [Series(s.name, s.labels, [(now.timestamp() - 60, 1.0), (now.timestamp() - 30, 1.0)]) for s in fleet()]
    prom = start_prometheus(recent[:2])  # vllm-0's series only: colon spellings
    assert main(["rules", "coverage", RULES, "--prometheus", prom.url, "--format", "json"]) == 0
    rows = {r["check"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["detect"]["found"] == {"vllm:num_requests_waiting": ["vllm:num_requests_waiting"]}
    assert rows["kv_pool_full"]["runnable"] is True
    assert main(["rules", "coverage", RULES, "--prometheus", prom.url]) == 0
    assert (
        capsys.readouterr().out.splitlines()[-1] == "1 of 1 trees can run every check; 0 of 3 queries cannot run here"
    )


def test_rules_coverage_says_what_is_missing(
    start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    prom = start_prometheus()
    assert main(["rules", "coverage", RULES, "--prometheus", prom.url]) == 0
    out = capsys.readouterr().out
    assert "CANNOT  queue_backlog/detect    missing: vllm:num_requests_waiting" in out
    assert out.splitlines()[-1] == "0 of 1 trees can run every check; 3 of 3 queries cannot run here"


def test_a_prometheus_that_refuses_every_query_is_an_error_not_a_diagnosis(
    start_prometheus: StartPrometheus, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every query over the sample limit (--query.max-samples): nothing was looked at, so exit 3 as
    the daemon answers 502/503, never a diagnosis of unknowns with exit 0."""
    prom = start_prometheus(fleet(), extra_args=["--query.max-samples=1"])
    code = main(["--rules", RULES, "diagnose", "queue_backlog", "--prometheus", prom.url, "--at", AT.isoformat()])
    captured = capsys.readouterr()
    assert code == 3, captured.out + captured.err
    assert "too many samples" in captured.err
    assert captured.out == ""
