"""The chart's values for the push sinks: config.alertmanager / config.grafana reach the settings
file as is, their tokens come from the Secret as DIAGNOSD_*_FILE files, never from the ConfigMap."""

from __future__ import annotations

import base64
from typing import Any

import yaml

from diagnosd.daemon.settings.model import Settings
from tests.deploy import chart

AM_TOKEN = "am-token-0123456789abcdef"
GRAFANA_TOKEN = "glsa_0123456789abcdef"
VALUES: dict[str, Any] = {
    "config": {
        "prometheus": {"url": "http://prometheus:9090"},
        "server": {"external_url": "https://diagnosd.example"},
        "alertmanager": {"urls": ["http://alertmanager-0:9093", "http://alertmanager-1:9093"]},
        "grafana": {"url": "http://grafana.monitoring.svc", "dashboard_uid": "diagnosd-triage", "language": "zh"},
    },
    "secrets": {"apiTokens": [chart.API_TOKEN], "alertmanagerBearerToken": AM_TOKEN, "grafanaToken": GRAFANA_TOKEN},
}


def container_env(manifests: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in chart.container(manifests)["env"]}


def test_sink_settings_render_into_the_config_and_tokens_into_secret_files() -> None:
    manifests = chart.render(VALUES)
    text = chart.one(manifests, "ConfigMap")["data"]["config.yaml"]
    assert AM_TOKEN not in text
    assert GRAFANA_TOKEN not in text
    settings = Settings.model_validate(yaml.safe_load(text))
    assert settings.alertmanager.urls == ["http://alertmanager-0:9093", "http://alertmanager-1:9093"]
    assert settings.alertmanager.resend_interval.total_seconds() == 60
    assert (settings.grafana.url, settings.grafana.dashboard_uid) == (
        "http://grafana.monitoring.svc",
        "diagnosd-triage",
    )
    assert settings.server.external_url == "https://diagnosd.example"
    env = container_env(manifests)
    assert env["DIAGNOSD_ALERTMANAGER_BEARER_TOKEN_FILE"] == "/etc/diagnosd/secrets/alertmanager-bearer-token"
    assert env["DIAGNOSD_GRAFANA_TOKEN_FILE"] == "/etc/diagnosd/secrets/grafana-token"
    data = chart.one(manifests, "Secret")["data"]
    assert base64.b64decode(data["alertmanager-bearer-token"]).decode() == AM_TOKEN
    assert base64.b64decode(data["grafana-token"]).decode() == GRAFANA_TOKEN


def test_by_default_both_sinks_are_off_and_no_sink_token_is_mounted() -> None:
    values = {"config": {"prometheus": {"url": "http://prometheus:9090"}}, "secrets": {"apiTokens": [chart.API_TOKEN]}}
    manifests = chart.render(values)
    settings = Settings.model_validate(yaml.safe_load(chart.one(manifests, "ConfigMap")["data"]["config.yaml"]))
    assert settings.alertmanager.urls == []
    assert settings.grafana.url is None
    env = container_env(manifests)
    assert "DIAGNOSD_ALERTMANAGER_BEARER_TOKEN_FILE" not in env
    assert "DIAGNOSD_GRAFANA_TOKEN_FILE" not in env


def test_an_existing_secret_may_hold_the_sink_tokens() -> None:
    values = {
        "config": {"prometheus": {"url": "http://prometheus:9090"}, "grafana": {"url": "http://grafana"}},
        "secrets": {"existingSecret": "mine", "existingSecretKeys": ["api-tokens", "grafana-token"]},
    }
    env = container_env(chart.render(values))
    assert env["DIAGNOSD_GRAFANA_TOKEN_FILE"] == "/etc/diagnosd/secrets/grafana-token"
