"""diagnosd's alerts on itself (helm/diagnosd/files/self-alerts.yml): promtool accepts them and their
unit tests pass (every alert fires where it should and not elsewhere), they read only metrics
diagnosd exports, each points at its runbook section, and the chart ships them with the release's job.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from diagnosd.sinks.metrics import FindingsCollector, Metrics
from diagnosd.trees.promql import parse, selector_names
from tests.conftest import REPO
from tests.deploy import chart
from tests.deploy.test_alert_files import tool

SELF_ALERTS = chart.FILES / "self-alerts.yml"
SELF_TESTS = chart.FILES / "self-alerts.test.yml"
DEPLOY_DOC = REPO / "docs" / "deploy.md"
# Prometheus's own per-target series.
NOT_IN_METRICS = {"up"}


def rules() -> list[dict[str, Any]]:
    (group,) = yaml.safe_load(SELF_ALERTS.read_text())["groups"]
    assert group["name"] == "diagnosd-self"
    found: list[dict[str, Any]] = group["rules"]
    return found


def exported() -> set[str]:
    """Every sample name diagnosd's /metrics can expose: the findings' families and the self-metrics
    (counters with their _total, histograms with their series)."""
    names: set[str] = set()
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.attach(FindingsCollector(list, list, 1, metrics.dropped))
    for family in registry.collect():
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


def test_promtool_checks_the_self_alerts() -> None:
    done = subprocess.run(
        [tool("promtool"), "check", "rules", str(SELF_ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_unit_tests_of_the_self_alerts_pass() -> None:
    done = subprocess.run(
        [tool("promtool"), "test", "rules", str(SELF_TESTS)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cases = [case for test in yaml.safe_load(SELF_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    names = {rule["alert"] for rule in rules()}
    assert names == {
        "DiagnosdNoSuccessfulRound",
        "DiagnosdTreeFailing",
        "DiagnosdPrometheusCircuitOpen",
        "DiagnosdAlertQueueNearFull",
        "DiagnosdDown",
    }
    assert firing == names
    assert quiet == names


def test_the_self_alerts_read_only_what_diagnosd_exports() -> None:
    known = exported() | NOT_IN_METRICS
    read = {name for rule in rules() for name in selector_names(parse(rule["expr"]))}
    assert read - known == set()
    assert "diagnosd_last_successful_round_timestamp_seconds" in read


def test_each_alert_explains_itself_and_points_at_its_runbook_section() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in DEPLOY_DOC.read_text().splitlines()
        if line.startswith("#")
    }
    for rule in rules():
        notes = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(notes), rule["alert"]
        page, _, anchor = notes["runbook_url"].partition("#")
        assert (page, anchor) == ("docs/deploy.md", rule["alert"].lower())
        assert anchor in anchors, f"docs/deploy.md has no section {rule['alert']}"
        assert rule["labels"]["severity"] in {"warning", "critical"}


def test_the_chart_ships_them_with_the_releases_job() -> None:
    named = {**chart.FULL, "fullnameOverride": "obs-diagnosd"}
    groups = chart.one(chart.render(named), "PrometheusRule")["spec"]["groups"]
    mine = next(group for group in groups if group["name"] == "diagnosd-self")
    down = next(rule for rule in mine["rules"] if rule["alert"] == "DiagnosdDown")
    assert [group["name"] for group in groups] == ["diagnosd-symptoms", "diagnosd-self"]
    assert down["expr"] == 'up{job="obs-diagnosd"} == 0 or absent(up{job="obs-diagnosd"})'
    assert [rule["alert"] for rule in mine["rules"]] == [rule["alert"] for rule in rules()]


def test_self_alerts_can_be_left_out() -> None:
    values = {**chart.FULL, "prometheusRule": {**chart.FULL["prometheusRule"], "selfAlerts": False}}
    groups = chart.one(chart.render(values), "PrometheusRule")["spec"]["groups"]
    assert [group["name"] for group in groups] == ["diagnosd-symptoms"]
