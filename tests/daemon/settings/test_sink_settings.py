"""The opt-in push sinks' settings (alertmanager, grafana) and the external URL their links use."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from diagnosd.daemon.settings.loader import dumps, load_settings
from diagnosd.errors import SettingsError

BASE = {"DIAGNOSD_PROMETHEUS_URL": "http://prometheus:9090"}


def test_both_sinks_are_off_by_default() -> None:
    s = load_settings(None, BASE)
    assert s.alertmanager.urls == []
    assert s.grafana.config(None) is None


def test_sinks_from_variables_with_tokens_from_files(tmp_path: Path) -> None:
    (tmp_path / "am").write_text("am-token\n")
    (tmp_path / "grafana").write_text("glsa_secret\n")
    env = BASE | {
        "DIAGNOSD_SERVER_EXTERNAL_URL": "https://diagnosd.example",
        "DIAGNOSD_ALERTMANAGER_URLS": "http://am-0:9093,http://am-1:9093",
        "DIAGNOSD_ALERTMANAGER_RESEND_INTERVAL": "30s",
        "DIAGNOSD_ALERTMANAGER_BEARER_TOKEN_FILE": str(tmp_path / "am"),
        "DIAGNOSD_ALERTMANAGER_LANGUAGE": "zh",
        "DIAGNOSD_GRAFANA_URL": "https://grafana.example",
        "DIAGNOSD_GRAFANA_TOKEN_FILE": str(tmp_path / "grafana"),
        "DIAGNOSD_GRAFANA_DASHBOARD_UID": "diagnosd-triage",
    }
    s = load_settings(None, env)
    am = s.alertmanager.config(s.server.external_url)
    assert am.urls == ("http://am-0:9093", "http://am-1:9093")
    assert (am.resend_interval, am.bearer_token, am.external_url) == (
        timedelta(seconds=30),
        "am-token",
        "https://diagnosd.example",
    )
    assert s.alertmanager.language == "zh"
    grafana = s.grafana.config(s.server.external_url)
    assert grafana is not None
    assert (grafana.url, grafana.token, grafana.dashboard_uid) == (
        "https://grafana.example",
        "glsa_secret",
        "diagnosd-triage",
    )
    shown = dumps(s)
    assert "am-token" not in shown
    assert "glsa_secret" not in shown


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DIAGNOSD_ALERTMANAGER_URLS": "am-0:9093"}, "alertmanager.urls: 'am-0:9093': expected http(s)://"),
        ({"DIAGNOSD_GRAFANA_URL": "https://admin:pw@grafana"}, "grafana.url: must not hold credentials"),
        ({"DIAGNOSD_SERVER_EXTERNAL_URL": "diagnosd"}, "server.external_url: 'diagnosd': expected http(s)://"),
        ({"DIAGNOSD_ALERTMANAGER_LANGUAGE": "fr"}, "alertmanager.language"),
    ],
)
def test_bad_sink_settings_are_refused_naming_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(None, BASE | env)
    assert message in str(raised.value)
