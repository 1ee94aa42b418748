"""The chart's Prometheus and Alertmanager files: the symptom alerts are exactly what the shipped
rules generate (so they cannot go stale) and promtool accepts them; amtool accepts the Alertmanager
example and routes symptom alerts, and only those, to diagnosd.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from diagnosd.cli.main import parser
from diagnosd.daemon import compose
from diagnosd.generate import alertrules
from tests.deploy import chart

REGENERATE = "python -m diagnosd rules alerts rules --out helm/diagnosd/files/symptom-alerts.yml"


def tool(name: str) -> str:
    binary = shutil.which(name)
    if binary is None:
        pytest.fail(f"{name} not found: apt-get install prometheus prometheus-alertmanager")
    return binary


@pytest.fixture(scope="module")
def rules() -> compose.Rules:
    """The shipped trees (loading them takes a while: once for the module)."""
    return compose.load(compose.default_rules_dir())


def test_symptom_alerts_are_what_the_shipped_rules_generate(rules: compose.Rules) -> None:
    hold = parser().parse_args(["rules", "alerts"]).hold  # the CLI's default `for`
    expected = alertrules.rule_file(list(rules.ruleset.trees.values()), rules.ruleset.aliases, hold)
    assert chart.ALERT_RULES.read_text() == expected, f"stale: regenerate with `{REGENERATE}`"


def test_promtool_accepts_the_symptom_alerts(rules: compose.Rules) -> None:
    done = subprocess.run(
        [tool("promtool"), "check", "rules", str(chart.ALERT_RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules.ruleset.trees)} rules found" in done.stdout


def test_every_symptom_alert_names_its_tree(rules: compose.Rules) -> None:
    trees = set(rules.ruleset.trees)
    (group,) = yaml.safe_load(chart.ALERT_RULES.read_text())["groups"]
    assert {rule["labels"]["symptom"] for rule in group["rules"]} == trees


def test_amtool_accepts_the_alertmanager_example() -> None:
    done = subprocess.run(
        [tool("amtool"), "check-config", str(chart.ALERTMANAGER_EXAMPLE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (
            ["alertname=DiagnosdQueueBacklog", "symptom=queue_backlog", "namespace=prod", "pod=vllm-0"],
            "diagnosd,default",
        ),
        (["alertname=VLLMHighTTFT", "namespace=prod"], "default"),
    ],
)
def test_the_example_routes_symptom_alerts_to_diagnosd_and_on(labels: list[str], receivers: str) -> None:
    done = routes_test(labels, receivers)
    assert done.returncode == 0, done.stdout + done.stderr


def routes_test(labels: list[str], receivers: str) -> subprocess.CompletedProcess[str]:
    """`amtool config routes test` of the example Alertmanager config: do alerts with these labels
    reach exactly these receivers (comma-separated)?"""
    return subprocess.run(
        [
            tool("amtool"),
            "config",
            "routes",
            "test",
            f"--config.file={chart.ALERTMANAGER_EXAMPLE}",
            f"--verify.receivers={receivers}",
            *labels,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
