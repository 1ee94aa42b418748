"""Alert rules generated from the trees: promtool accepts them and a real Prometheus fires them."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from diagnosd.cli.exits import EXIT_OK, EXIT_USAGE
from diagnosd.cli.main import main
from diagnosd.daemon import compose
from diagnosd.errors import ParamError, UnknownSymptom
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


def alerts_of(text: str) -> dict[str, str]:
    (group,) = yaml.safe_load(text)["groups"]
    return {rule["labels"]["symptom"]: rule["expr"] for rule in group["rules"]}


def promtool_check(path: Path) -> None:
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_param_overrides_change_the_threshold_and_promtool_still_accepts(tmp_path: Path) -> None:
    rules = compose.load(RULES)
    trees = list(rules.ruleset.trees.values())
    params: dict[str, dict[str, float | str]] = {
        "queue_backlog": {"queue_limit": "25", "sustain": "10m", "sustain_share": 0.9}
    }
    path = tmp_path / "alerts.yml"
    path.write_text(rule_file(trees, rules.ruleset.aliases, params=params))
    default = alerts_of(rule_file(trees, rules.ruleset.aliases))
    changed = alerts_of(path.read_text())
    promtool_check(path)
    assert default["queue_backlog"].startswith("(quantile_over_time(0.2, ")
    assert default["queue_backlog"].endswith("[5m:1m])) > 10")
    assert changed["queue_backlog"].startswith("(quantile_over_time(0.1, ")
    assert changed["queue_backlog"].endswith("[10m:1m])) > 25")
    assert changed["ttft_high"] == default["ttft_high"]  # a tree without overrides keeps its defaults
    assert "# Params overridden: queue_backlog.queue_limit=25, queue_backlog.sustain=10m" in path.read_text()


@pytest.mark.parametrize(
    ("params", "error", "named"),
    [
        ({"queue_backlgo": {"waiting": 25}}, UnknownSymptom, "unknown symptom 'queue_backlgo'"),
        ({"queue_backlog": {"waitng": 25}}, ParamError, "param queue_backlog.waitng: no such param"),
        ({"queue_backlog": {"window": "often"}}, ParamError, "param queue_backlog.window: 'often' is not a duration"),
    ],
)
def test_an_override_that_does_not_fit_is_an_error_naming_it(
    params: dict[str, dict[str, float | str]], error: type[Exception], named: str
) -> None:
    rules = compose.load(FIXTURE)
    with pytest.raises(error, match=re.escape(named)):
        rule_file(list(rules.ruleset.trees.values()), rules.ruleset.aliases, params=params)


def test_the_command_reads_the_daemons_settings_file_then_param_flags(tmp_path: Path) -> None:
    config = tmp_path / "diagnosd.yml"
    settings = {
        "prometheus": {"url": "http://prometheus:9090"},
        "params": {"queue_backlog": {"waiting": 25, "window": "10m"}},
    }
    config.write_text(yaml.safe_dump(settings))
    out = tmp_path / "alerts.yml"
    command = ["rules", "alerts", str(FIXTURE), "--config", str(config), "--out", str(out)]
    assert main(command) == EXIT_OK
    from_file = alerts_of(out.read_text())["queue_backlog"]
    assert main([*command, "--param", "queue_backlog.waiting=40"]) == EXIT_OK
    promtool_check(out)
    assert "[10m]" in from_file
    assert from_file.endswith(" > 25")
    assert alerts_of(out.read_text())["queue_backlog"].endswith(" > 40")  # the flag over the file


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--param", "queue_backlog.waitng=25"], "param queue_backlog.waitng: no such param"),
        (["--param", "queue_backlgo.waiting=25"], "unknown symptom 'queue_backlgo'"),
        (["--param", "waiting=25"], "--param: 'waiting=25' is not SYMPTOM.NAME=VALUE"),
    ],
)
def test_the_command_refuses_an_override_naming_it(
    extra: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "alerts.yml"
    assert main(["rules", "alerts", str(FIXTURE), "--out", str(out), *extra]) == EXIT_USAGE
    assert named in capsys.readouterr().err
    assert not out.exists()


def test_a_settings_file_naming_an_unknown_tree_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "diagnosd.yml"
    settings = {"prometheus": {"url": "http://prometheus:9090"}, "params": {"queue_backlgo": {"waiting": 1}}}
    config.write_text(yaml.safe_dump(settings))
    assert main(["rules", "alerts", str(FIXTURE), "--config", str(config)]) == EXIT_USAGE
    assert "params.queue_backlgo" in capsys.readouterr().err
