"""Alert rules generated from the trees: promtool accepts them and a real Prometheus fires them."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from diagnosd.daemon import compose
from diagnosd.generate.alertrules import expression, rule_file
from diagnosd.promlocal.openmetrics import Series
from tests.conftest import REPO, RULES, StartPrometheus

FIXTURE = REPO / "tests" / "fixtures" / "rules"


def test_shipped_trees_give_rules_promtool_accepts(tmp_path: Path) -> None:
    rules = compose.load(RULES)
    path = tmp_path / "alerts.yml"
    path.write_text(rule_file(list(rules.ruleset.trees.values()), rules.ruleset.aliases))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules.ruleset.trees)} rules found" in done.stdout


def test_baseline_becomes_offset_and_names_match_every_spelling() -> None:
    rules = compose.load(FIXTURE)
    tree = rules.ruleset.trees["queue_backlog"].model_copy(
        update={
            "detect": rules.ruleset.trees["queue_backlog"].detect.model_copy(
                update={
                    "compare": rules.ruleset.trees["queue_backlog"].detect.compare.model_copy(
                        update={"above": None, "ratio_above": 2.0, "baseline": "1d"}
                    )
                }
            )
        }
    )
    # Each spelling on its own, newest (as written, colon) first; `or` keeps it per target.
    assert expression(tree, rules.ruleset.aliases) == (
        "(min by (namespace, pod)(min_over_time(vllm:num_requests_waiting{}[5m]))"
        " or  min by (namespace, pod)(min_over_time(vllm_num_requests_waiting{}[5m])))"
        " > 2 * (min by (namespace, pod)(min_over_time(vllm:num_requests_waiting{}[5m] offset 1d))"
        " or  min by (namespace, pod)(min_over_time(vllm_num_requests_waiting{}[5m] offset 1d)))"
    )


@pytest.mark.parametrize(
    "names",
    [
        ["vllm_num_requests_waiting"],
        # Colon and underscore twins on one pod (a client upgrade): one alert, 30 waiting, not 60.
        ["vllm:num_requests_waiting", "vllm_num_requests_waiting"],
    ],
)
def test_a_real_prometheus_fires_the_symptom_alert(
    names: list[str], tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    rules = compose.load(FIXTURE)
    path = tmp_path / "alerts.yml"
    path.write_text(rule_file(list(rules.ruleset.trees.values()), rules.ruleset.aliases, hold="0s"))
    now = datetime.now(UTC).timestamp()
    points = [(now - 600 + 15 * i, 30.0) for i in range(40)]
    series = [Series(name, {"namespace": "prod", "pod": "vllm-0"}, points) for name in names]
    prom = start_prometheus(series, rule_files=[str(path)], scrape_interval="1s")
    deadline = time.monotonic() + 20
    alerts: list[dict[str, object]] = []
    while time.monotonic() < deadline and not alerts:
        with urllib.request.urlopen(f"{prom.url}/api/v1/alerts", timeout=2) as response:
            alerts = json.load(response)["data"]["alerts"]
        time.sleep(0.2)
    assert [a["labels"] for a in alerts] == [
        {
            "alertname": "DiagnosdQueueBacklog",
            "symptom": "queue_backlog",
            "severity": "warning",
            "namespace": "prod",
            "pod": "vllm-0",
        }
    ]
    assert float(str(alerts[0]["value"])) == 30


def test_all_and_any_become_and_and_or_of_the_conditions() -> None:
    rules = compose.load(RULES)
    expr = expression(rules.ruleset.trees["gpu_underutilized"], rules.ruleset.aliases)
    gpu, slow = expr.split(" and on (namespace, pod) ")
    assert "DCGM_FI_DEV_GPU_UTIL" in gpu
    assert gpu.endswith("< 40)")
    assert slow.count(" or on (namespace, pod) ") == 3  # TTFT or e2e, vs baseline or over an SLO
    assert "time_to_first_token" in slow
    assert "e2e_request_latency" in slow
    assert "+ 100" not in expr
    assert "bool" not in expr


def test_a_sustained_detect_alerts_on_its_quantile() -> None:
    rules = compose.load(RULES)
    expr = expression(rules.ruleset.trees["queue_backlog"], rules.ruleset.aliases)
    assert expr.startswith("(quantile_over_time(0.2, ")
    assert "[5m:1m]" in expr
    assert "min_over_time" not in expr
