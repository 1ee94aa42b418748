"""The Helm chart, read as files: its metadata and values, and that its templates ask only for values
that exist and set only DIAGNOSD_* variables diagnosd knows.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from diagnosd import __version__
from diagnosd.api import create_app
from diagnosd.daemon import compose
from diagnosd.daemon.settings.loader import env_names
from diagnosd.daemon.settings.model import Settings
from tests.conftest import REPO
from tests.deploy import chart

SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


def test_chart_yaml_has_the_required_fields() -> None:
    meta = chart.metadata()
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "diagnosd" == chart.CHART.name
    assert SEMVER.match(meta["version"])
    assert meta["type"] == "application"
    assert meta["appVersion"] == __version__


def test_values_yaml_parses_with_the_keys_the_templates_build_on() -> None:
    values = chart.values()
    for path in [
        ("image", "repository"),
        ("image", "tag"),
        ("config", "prometheus", "url"),
        ("secrets", "apiTokens"),
        ("secrets", "existingSecret"),
        ("listen", "port"),
        ("service", "port"),
        ("persistence", "enabled"),
        ("serviceMonitor", "enabled"),
        ("prometheusRule", "enabled"),
    ]:
        assert chart.has_path(values, path), ".".join(path)


def test_every_values_path_a_template_reads_exists_in_values_yaml() -> None:
    refs = chart.value_refs()
    assert len(refs) > 30, "the .Values pattern found too little: is it still right?"
    values = chart.values()
    missing = sorted(".".join(r) for r in refs if not chart.has_path(values, r))
    assert missing == []


def test_every_top_level_value_is_documented_in_the_readme() -> None:
    readme = (chart.CHART / "README.md").read_text()
    undocumented = [key for key in chart.values() if f"`{key}" not in readme]
    assert undocumented == []


def test_every_diagnosd_variable_in_the_templates_is_one_the_settings_loader_reads() -> None:
    used = chart.env_names_used()
    assert {"DIAGNOSD_STORE_PATH", "DIAGNOSD_AUTH_API_TOKENS_FILE"} <= used
    known = env_names()
    assert sorted(used - set(known)) == []


def test_the_default_config_is_valid_settings_once_a_url_is_given() -> None:
    """values.yaml's `config` goes into the settings file as is: a typo there would stop the pod."""
    config: dict[str, Any] = chart.values()["config"]
    assert config["prometheus"]["url"] == ""
    config["prometheus"]["url"] = "http://prometheus:9090"
    settings = Settings.model_validate(config)
    assert settings.server.loopback  # the chart's --host flag makes it listen on the pod's address


def test_every_path_the_chart_points_at_is_a_route_of_the_app() -> None:
    """Probe and scrape paths, NOTES.txt's curl examples, the Alertmanager example's webhook URL."""
    texts = [text for _, text in chart.template_texts()]
    texts.append(chart.ALERTMANAGER_EXAMPLE.read_text())
    used = {m.group(1) for text in texts for m in re.finditer(r"(?:path: |:8080)(/[a-z0-9/_<>]+)", text)}
    assert {"/healthz", "/readyz", "/metrics", "/webhook/alertmanager", "/findings", "/diagnose/ttft_high"} <= used
    settings = Settings.model_validate({"prometheus": {"url": "http://prometheus:9090"}})
    routes = list(create_app(compose.build(settings)).openapi()["paths"])
    patterns = [re.compile(re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(r)) + "$") for r in routes]
    unknown = sorted(p for p in used if not any(x.match(p) for x in patterns))
    assert unknown == [], f"not routes of the app ({routes})"


def test_the_alertmanager_example_is_yaml_pointing_at_the_webhook_with_credentials() -> None:
    example = yaml.safe_load(chart.ALERTMANAGER_EXAMPLE.read_text())
    receiver = next(r for r in example["receivers"] if r["name"] == "diagnosd")
    (hook,) = receiver["webhook_configs"]
    assert hook["url"].endswith(":8080/webhook/alertmanager")
    assert hook["send_resolved"] is True
    auth = hook["http_config"]
    assert "authorization" in auth or "basic_auth" in auth


def test_every_diagnosd_variable_the_deployment_docs_name_is_one_the_loader_reads() -> None:
    texts = [(REPO / "docs" / "deploy.md").read_text(), (chart.CHART / "README.md").read_text()]
    named = {m.group(0) for text in texts for m in chart.ENV_NAME.finditer(text)}
    assert "DIAGNOSD_PROMETHEUS_HEADERS" in named
    assert sorted(named - set(env_names())) == []
