"""diagnosd's Grafana dashboard: the shipped JSON is what the generator builds, every panel query
is PromQL naming only series diagnosd exports (or a real exporter's) and answers on a real Prometheus
scraping a running diagnosd, the panels asked for are there, and the chart ships it to Grafana's
sidecar when asked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from diagnosd.api import create_app
from diagnosd.generate import dashboard
from diagnosd.promlocal import free_port
from diagnosd.trees.promql import parse, selector_names
from tests.conftest import REPO
from tests.deploy import chart
from tests.deploy.test_self_alerts import exported
from tests.serving import TOKEN, ThreadedServer, build, fleet_prometheus, settings, wait_until

SHIPPED = [REPO / "docs" / "grafana" / "diagnosd.json", chart.FILES / "dashboard.json"]
REGENERATE = f"python -m diagnosd.generate.dashboard {' '.join(str(p.relative_to(REPO)) for p in SHIPPED)}"
# Grafana's own interval variables, which stand where PromQL wants a duration.
INTERVALS = re.compile(r"\$__(rate_interval|interval|range)\b")
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+), (?P<label>\w+)\)$")


def real_exporter_names() -> set[str]:
    lines = (REPO / "diagnosd" / "sim" / "known_metrics.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


@pytest.fixture(scope="module")
def board() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(dashboard.render())
    return data


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from (panel for panel in board["panels"] if panel["type"] != "row")


def queries(board: dict[str, Any]) -> Iterator[str]:
    """Every PromQL the dashboard sends: the panels' targets and the variables' label_values()."""
    for panel in panels(board):
        yield from (target["expr"] for target in panel["targets"])
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found = LABEL_VALUES.match(variable["query"]["query"])
            assert found, variable["query"]
            yield found["selector"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_the_shipped_dashboard_is_what_the_generator_builds(path: Any) -> None:
    assert path.read_text() == dashboard.render(), f"stale: regenerate with `{REGENERATE}`"


def test_every_query_is_promql_naming_only_exported_or_real_exporter_names(board: dict[str, Any]) -> None:
    known = exported() | real_exporter_names()
    named: set[str] = set()
    for expr in queries(board):
        named |= set(selector_names(parse(INTERVALS.sub("5m", expr))))
    assert named - known == set()
    # The self-metrics this dashboard exists to show, each read by some panel.
    assert {
        "diagnosd_root_cause",
        "diagnosd_symptom_active",
        "diagnosd_check_value",
        "diagnosd_rounds_total",
        "diagnosd_tree_errors_total",
        "diagnosd_alert_queue_length",
        "diagnosd_prometheus_circuit_state",
    } <= named


def test_the_panels_asked_for_are_there(board: dict[str, Any]) -> None:
    by_title = {panel["title"]: panel for panel in panels(board)}
    triage = by_title["Triage board: symptoms present, by target"]
    causes = by_title["Active root causes"]
    timeline = by_title["Findings over time"]
    assert [t["id"] for t in triage["transformations"]] == ["groupingToMatrix"]  # symptoms x targets
    assert causes["type"] == "table"
    assert [o["matcher"]["options"] for o in causes["fieldConfig"]["overrides"]] == ["severity"]
    assert timeline["type"] == "state-timeline"
    assert all('pod="$pod"' in t["expr"] for t in by_title["Evidence on $pod: what each check saw"]["targets"])
    assert {"Rounds by outcome", "Tree errors by reason", "Alert queue", "Prometheus circuit"} <= set(by_title)


def test_every_panel_reads_the_chosen_data_source_and_has_its_own_id(board: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels(board):
        assert {t["datasource"]["uid"] for t in panel["targets"]} == {"${datasource}"}, panel["title"]
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), panel["title"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(set(ids)) == len(ids)


def test_the_chart_ships_it_for_grafanas_sidecar_when_asked() -> None:
    asked = {**chart.FULL, "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "LLM serving"}}}
    maps = [m for m in chart.render(asked) if m["kind"] == "ConfigMap" and "diagnosd.json" in m.get("data", {})]
    assert len(maps) == 1
    (config_map,) = maps
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "LLM serving"}
    assert json.loads(config_map["data"]["diagnosd.json"]) == json.loads(dashboard.render())
    assert not [m for m in chart.render(chart.FULL) if "diagnosd.json" in m.get("data", {})]  # off by default


def grafana_would_send(expr: str) -> str:
    """The query with the dashboard's variables as Grafana fills them: every namespace and symptom
    (the "All" value), the pod with the finding (vllm-0 in the fixture fleet), a 1m rate interval."""
    values = {"$namespace": ".*", "$symptom": ".*", "$pod": "vllm-0"}
    for name, value in values.items():
        expr = expr.replace(name, value)
    return INTERVALS.sub("1m", expr)


def test_every_panel_query_answers_on_a_prometheus_scraping_diagnosd(board: dict[str, Any], tmp_path: Path) -> None:
    """One Prometheus holds the fleet's history and scrapes a running diagnosd whose rounds (every
    second, at the fixture's instant) find vllm-0's full KV pool; then every panel's queries answer."""
    port = free_port()
    rounds = {"enabled": True, "interval": "1s"}
    with fleet_prometheus(tmp_path / "prometheus", scraping=port) as url:
        config = settings(url, tmp_path, auth={"api_tokens": [TOKEN]}, scheduler=rounds)
        with ThreadedServer(create_app(build(config)), port):

            def answer(expr: str) -> list[dict[str, Any]]:
                body = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
                assert body["status"] == "success", (expr, body)
                found: list[dict[str, Any]] = body["data"]["result"]
                return found

            # Three scrapes since the first finding: enough for every rate() over 1m.
            wait_until(lambda: answer("count_over_time(diagnosd_root_cause[1m]) >= 3"), 30, "scrapes of a finding")
            empty = {
                panel["title"]: [t["expr"] for t in panel["targets"] if not answer(grafana_would_send(t["expr"]))]
                for panel in panels(board)
            }
            pods = answer(f"max by (pod) ({grafana_would_send(variable_selector(board, 'pod'))})")
    # No query error happened, so that panel alone may be empty (errors by endpoint and kind).
    assert {title: exprs for title, exprs in empty.items() if exprs} == {
        "Prometheus query errors": [board_expr(board, "Prometheus query errors")]
    }
    # The $pod choices: the pods with a firing finding (queue_backlog on vllm-0, kv_hit_low on vllm-1).
    assert sorted(p["metric"]["pod"] for p in pods) == ["vllm-0", "vllm-1"]


def variable_selector(board: dict[str, Any], name: str) -> str:
    (variable,) = (v for v in board["templating"]["list"] if v["name"] == name)
    found = LABEL_VALUES.match(variable["query"]["query"])
    assert found
    return found["selector"]


def board_expr(board: dict[str, Any], title: str) -> str:
    (panel,) = (p for p in panels(board) if p["title"] == title)
    expr: str = panel["targets"][0]["expr"]
    return expr
