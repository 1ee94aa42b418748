"""The settings sources on pydantic-settings: variable names as its environment source reads them,
which source wins, secrets from named files, the origin of every problem, no secret in any message."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from diagnosd.daemon.settings.loader import env_names, load_settings
from diagnosd.daemon.settings.model import PrometheusSettings, Settings
from diagnosd.daemon.settings.sources import EnvironmentSource
from diagnosd.errors import SettingsError

SECRET = "s3cret-token-0123456789abcdef"
BASE = {"DIAGNOSD_PROMETHEUS_URL": "http://127.0.0.1:9090"}


def problems(error: SettingsError) -> list[str]:
    return [str(p) for p in error.problems]


@pytest.mark.parametrize("variable", sorted(name for name in env_names() if not name.endswith("_FILE")))
def test_every_variable_the_loader_knows_lands_on_its_setting(variable: str) -> None:
    """env_names() (what the chart is checked against) and the nested names pydantic-settings
    reads must agree: DIAGNOSD_PROMETHEUS_BEARER_TOKEN is prometheus.bearer_token, not .bearer.token."""
    node: Any = EnvironmentSource({variable: "x"})()
    for part in env_names()[variable]:
        node = node[part]
    assert node in ("x", ["x"])


def test_keys_with_underscores_under_a_section_are_one_setting() -> None:
    env = BASE | {
        "DIAGNOSD_PROMETHEUS_BEARER_TOKEN": SECRET,
        "DIAGNOSD_WEBHOOK_MAX_BODY_BYTES": "2048",
        "DIAGNOSD_FINDINGS_FOR_BY_SYMPTOM": '{"queue_backlog": "2m"}',
        "DIAGNOSD_PROMETHEUS_INSECURE_SKIP_VERIFY": "true",
    }
    s = load_settings(None, env)
    assert s.prometheus.bearer_token is not None
    assert s.prometheus.bearer_token.get_secret_value() == SECRET
    assert s.webhook.max_body_bytes == 2048
    assert s.findings.pending_for("queue_backlog").total_seconds() == 120
    assert s.prometheus.insecure_skip_verify is True


def test_unknown_variables_are_warned_about_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    env = BASE | {"DIAGNOSD_SERVER_PROT": "1", "DIAGNOSD_SERVER": '{"port": 1}', "OTHER_PORT": "1"}
    with caplog.at_level(logging.WARNING):
        s = load_settings(None, env)
    assert s.server.port == 8080
    warned = sorted(r.getMessage() for r in caplog.records)
    assert warned == [
        "ignoring unknown setting variable DIAGNOSD_SERVER",
        "ignoring unknown setting variable DIAGNOSD_SERVER_PROT",
    ]


def test_a_flag_wins_over_a_variable_over_the_file_and_only_the_winner_is_checked(tmp_path: Path) -> None:
    config = tmp_path / "diagnosd.yaml"
    config.write_text("prometheus: {url: 'http://file:9090'}\nserver: {port: 70000}\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(config, {})
    assert problems(caught.value) == [f"{config}:2: server.port: Input should be less than or equal to 65535"]
    assert load_settings(config, {"DIAGNOSD_SERVER_PORT": "9100"}).server.port == 9100
    assert load_settings(config, {"DIAGNOSD_SERVER_PORT": "9100"}, {("server", "port"): 9200}).server.port == 9200
    with pytest.raises(SettingsError) as caught:
        load_settings(config, {"DIAGNOSD_SERVER_PORT": "9100"}, {("server", "port"): 0})
    assert problems(caught.value) == ["--port: server.port: Input should be greater than or equal to 1"]


def test_a_problem_of_a_whole_section_does_not_blame_the_file_that_opened_it(tmp_path: Path) -> None:
    config = tmp_path / "diagnosd.yaml"
    config.write_text("prometheus:\n  url: http://file:9090\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(config, {"DIAGNOSD_PROMETHEUS_USERNAME": "u"})
    assert problems(caught.value) == ["settings: prometheus: username and password go together"]


def test_a_mapping_from_a_later_source_adds_to_the_file_s_keys(tmp_path: Path) -> None:
    config = tmp_path / "diagnosd.yaml"
    config.write_text("prometheus:\n  url: http://file:9090\n  headers: {X-Scope-OrgID: tenant-a, X-Team: a}\n")
    s = load_settings(config, {"DIAGNOSD_PROMETHEUS_HEADERS": '{"X-Team": "b", "X-Extra": "1"}'})
    assert s.prometheus.headers == {"X-Scope-OrgID": "tenant-a", "X-Team": "b", "X-Extra": "1"}


def test_a_missing_secret_file_names_its_variable_or_its_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(SettingsError) as caught:
        load_settings(None, BASE | {"DIAGNOSD_PROMETHEUS_BEARER_TOKEN_FILE": str(missing)})
    assert problems(caught.value) == [
        f"DIAGNOSD_PROMETHEUS_BEARER_TOKEN_FILE: prometheus.bearer_token_file: cannot read {missing}: "
        "No such file or directory"
    ]
    config = tmp_path / "diagnosd.yaml"
    config.write_text(f"prometheus:\n  url: http://file:9090\n  bearer_token_file: {missing}\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(config, {})
    assert problems(caught.value) == [
        f"{config}:3: prometheus.bearer_token_file: cannot read {missing}: No such file or directory"
    ]


def test_a_secret_from_a_later_source_replaces_the_file_s_own(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"{SECRET}\n")
    config = tmp_path / "diagnosd.yaml"
    config.write_text("prometheus: {url: 'http://file:9090', bearer_token: file-token-0123456789}\n")
    s = load_settings(config, {"DIAGNOSD_PROMETHEUS_BEARER_TOKEN_FILE": str(token)})
    assert s.prometheus.config().bearer_token == SECRET


def test_no_secret_appears_in_any_problem_whatever_its_source(tmp_path: Path) -> None:
    short = "short-secret"  # refused as too short: the message must not quote it
    (tmp_path / "password").write_text(f"{SECRET}\n")
    (tmp_path / "tokens").write_text(f"{short}\n")
    config = tmp_path / "diagnosd.yaml"
    config.write_text(f"prometheus:\n  url: http://file:9090\n  bearer_token: {SECRET}\n  username: u\n")
    env = {
        "DIAGNOSD_AUTH_API_TOKENS_FILE": str(tmp_path / "tokens"),
        "DIAGNOSD_AUTH_WEBHOOK_TOKENS": f'["{short}"]',
        "DIAGNOSD_AUTH_WEBHOOK_PASSWORD_FILE": str(tmp_path / "password"),  # without webhook_username
        "DIAGNOSD_SERVER_PORT": SECRET,
        "DIAGNOSD_LOG_LEVEL": SECRET,
    }
    with pytest.raises(SettingsError) as caught:
        load_settings(config, env)
    found = problems(caught.value)
    assert len(found) >= 5, found  # every one of them was checked
    for text in [*found, str(caught.value), repr(caught.value.problems)]:
        assert SECRET not in text
        assert short not in text
    with pytest.raises(SettingsError) as caught:
        load_settings(None, {"DIAGNOSD_PROMETHEUS_URL": f"http://u:{SECRET}@prom:9090"})
    assert SECRET not in str(caught.value)


def test_settings_built_in_code_never_read_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DIAGNOSD_SERVER_PORT", "9999")
    assert Settings(prometheus=PrometheusSettings(url="http://127.0.0.1:9090")).server.port == 8080
    assert load_settings(None, BASE).server.port == 8080  # only the mapping it is given
