"""Settings from a YAML file, DIAGNOSD_* variables and flags: precedence, every problem at once
with its source, secrets from files and never in a message, unsafe setups refused."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from diagnosd.daemon import compose
from diagnosd.daemon.settings.loader import dumps, env_names, load_settings
from diagnosd.daemon.settings.model import format_duration
from diagnosd.errors import SettingsError
from tests.serving import RULES

SECRET = "s3cret-token-0123456789abcdef"
BASE = {"DIAGNOSD_PROMETHEUS_URL": "http://127.0.0.1:9090"}


def problems(error: SettingsError) -> list[str]:
    return [str(p) for p in error.problems]


def test_defaults_need_only_the_prometheus_url() -> None:
    s = load_settings(None, BASE)
    assert (s.server.host, s.server.port) == ("127.0.0.1", 8080)
    assert s.scheduler.interval == timedelta(seconds=30)
    assert s.findings.for_ == timedelta(minutes=1)
    assert s.store.path == Path("diagnosd.db")
    assert s.webhook.scope_labels == ["model_name"]


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "diagnosd.yaml"
    config.write_text(
        "prometheus: {url: 'http://file:9090', timeout: 3s, headers: {X-Scope-OrgID: tenant-a}}\n"
        "server: {port: 9000, host: 127.0.0.2}\n"
        "scheduler: {interval: 1m, scope: {namespace: prod}}\n"
        "findings: {for: 0s, for_by_symptom: {queue_backlog: 2m}}\n"
        "webhook: {alertname_map: {VLLMQueueBacklog: queue_backlog}}\n"
    )
    env = {"DIAGNOSD_PROMETHEUS_URL": "http://env:9090", "DIAGNOSD_SERVER_PORT": "9100"}
    s = load_settings(config, env, {("server", "port"): 9200})
    assert s.prometheus.url == "http://env:9090"
    assert s.prometheus.timeout == timedelta(seconds=3)
    assert s.prometheus.headers == {"X-Scope-OrgID": "tenant-a"}
    assert (s.server.host, s.server.port) == ("127.0.0.2", 9200)
    assert s.scheduler.scope == {"namespace": "prod"}
    assert s.findings.pending_for("queue_backlog") == timedelta(minutes=2)
    assert s.findings.pending_for("kv_hit_low") == timedelta(0)
    assert s.webhook.alertname_map == {"VLLMQueueBacklog": "queue_backlog"}


def test_structured_environment_values() -> None:
    env = BASE | {
        "DIAGNOSD_WEBHOOK_SCOPE_LABELS": "model_name, cluster",
        "DIAGNOSD_WEBHOOK_ALERTNAME_MAP": '{"VLLMHighTTFT": "ttft_high"}',
        "DIAGNOSD_SCHEDULER_SCOPE": "namespace: prod",
        "DIAGNOSD_AUTH_API_TOKENS": f'["{SECRET}", "other-token-0123456789"]',
        "DIAGNOSD_SCHEDULER_ENABLED": "false",
        "DIAGNOSD_PARAMS": '{"queue_backlog": {"waiting": 20}}',
    }
    s = load_settings(None, env)
    assert s.webhook.scope_labels == ["model_name", "cluster"]
    assert s.webhook.alertname_map == {"VLLMHighTTFT": "ttft_high"}
    assert s.scheduler.scope == {"namespace": "prod"}
    assert [t.get_secret_value() for t in s.auth.api_tokens] == [SECRET, "other-token-0123456789"]
    assert s.scheduler.enabled is False
    assert s.params == {"queue_backlog": {"waiting": 20}}


def test_every_problem_at_once_with_its_source_and_no_secret(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "prometheus:\n  url: 'ftp://x'\n  retries: -1\n"
        f"auth:\n  api_tokens: ['{SECRET[:8]}']\n"
        "scheduler: {interval: soon}\n"
        "promethues: {}\n"
    )
    env = {"DIAGNOSD_SERVER_PORT": "70000", "DIAGNOSD_WEBHOOK_ALERTNAME_MAP": "[1, 2]"}
    with pytest.raises(SettingsError) as caught:
        load_settings(config, env)
    found = problems(caught.value)
    text = str(caught.value)
    assert f"{config}:2: prometheus.url: expected http(s)://host[:port][/path]" in found
    assert f"{config}:3: prometheus.retries: Input should be greater than or equal to 0" in found
    assert any(p.startswith(f"{config}:5: auth.api_tokens[0]: too short") for p in found)
    assert any(p.startswith(f"{config}:6: scheduler.interval: 'soon' is not a duration") for p in found)
    assert f"{config}:7: promethues: unknown setting" in found
    assert "DIAGNOSD_SERVER_PORT: server.port: Input should be less than or equal to 65535" in found
    assert any(p.startswith("DIAGNOSD_WEBHOOK_ALERTNAME_MAP: webhook.alertname_map: expected dict") for p in found)
    assert SECRET[:8] not in text


def test_a_missing_url_names_the_variable() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(None, {})
    assert problems(caught.value) == ["settings: prometheus: required: set prometheus.url (or DIAGNOSD_PROMETHEUS_URL)"]


def test_secrets_from_files_are_read_and_masked(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# API tokens\n{SECRET}\n\nsecond-token-0123456789\n")
    password = tmp_path / "password"
    password.write_text("prometheus-password\n")
    env = BASE | {
        "DIAGNOSD_AUTH_API_TOKENS_FILE": str(tokens),
        "DIAGNOSD_PROMETHEUS_USERNAME": "diagnosd",
        "DIAGNOSD_PROMETHEUS_PASSWORD_FILE": str(password),
    }
    s = load_settings(None, env)
    assert [t.get_secret_value() for t in s.auth.api_tokens] == [SECRET, "second-token-0123456789"]
    assert s.prometheus.config().basic_auth == ("diagnosd", "prometheus-password")
    shown = dumps(s) + repr(s) + str(s)
    assert SECRET not in shown
    assert "prometheus-password" not in shown


def test_an_unreadable_secret_file_is_named_without_content(tmp_path: Path) -> None:
    env = BASE | {"DIAGNOSD_AUTH_WEBHOOK_TOKENS_FILE": str(tmp_path / "missing")}
    with pytest.raises(SettingsError) as caught:
        load_settings(None, env)
    [problem] = problems(caught.value)
    assert problem.startswith("DIAGNOSD_AUTH_WEBHOOK_TOKENS_FILE: auth.webhook_tokens_file: cannot read")
    assert "No such file or directory" in problem


def test_a_secret_and_its_file_together_are_refused(tmp_path: Path) -> None:
    (tmp_path / "t").write_text(SECRET)
    env = BASE | {
        "DIAGNOSD_PROMETHEUS_BEARER_TOKEN": SECRET,
        "DIAGNOSD_PROMETHEUS_BEARER_TOKEN_FILE": str(tmp_path / "t"),
    }
    with pytest.raises(SettingsError, match="set both bearer_token and bearer_token_file"):
        load_settings(None, env)


def test_invalid_yaml_names_the_line_without_quoting_it(tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text(f"prometheus:\n  url: http://x\n  bearer_token: {SECRET}\n  headers: [unclosed\n")
    with pytest.raises(SettingsError) as caught:
        load_settings(config, {})
    [problem] = problems(caught.value)
    assert problem.startswith(f"{config}:")
    assert "invalid YAML" in problem
    assert SECRET not in problem


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DIAGNOSD_SERVER_HOST": "0.0.0.0"}, "refusing to serve on 0.0.0.0 without credentials"),
        ({"DIAGNOSD_PROMETHEUS_URL": "http://user:pw@prom:9090"}, "must not hold credentials"),
        ({"DIAGNOSD_FINDINGS_STATE_TTL": "30s"}, "state_ttl must be at least twice scheduler.interval"),
        ({"DIAGNOSD_PROMETHEUS_USERNAME": "u"}, "username and password go together"),
        ({"DIAGNOSD_SCHEDULER_SCOPE": '{"bad-label": "x"}'}, "is not a label name"),
        ({"DIAGNOSD_SCHEDULER_INTERVAL": "0s"}, "must be longer than 0s"),
        ({"DIAGNOSD_TOPOLOGY_CANARY_POD_PATTERN": ".+-canary-(.+"}, "topology.canary_pod_pattern: .*not a regular"),
        ({"DIAGNOSD_TOPOLOGY_CANARY_LABEL": "track-name"}, "topology.canary_label: .*is not a label name"),
    ],
)
def test_unsafe_or_inconsistent_settings_are_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(None, BASE | env)


def test_the_canary_convention_reaches_the_topology_recipes() -> None:
    default = load_settings(None, BASE).topology.topology()
    assert (default.canary_label, default.canary_value, default.canary_pod_pattern) == ("track", "canary", None)
    env = BASE | {"DIAGNOSD_TOPOLOGY_CANARY_POD_PATTERN": ".+-canary-.+"}
    assert load_settings(None, env).topology.topology().canary_pod_pattern == ".+-canary-.+"


def test_non_loopback_with_tokens_or_explicit_anonymous_is_fine() -> None:
    load_settings(None, BASE | {"DIAGNOSD_SERVER_HOST": "0.0.0.0", "DIAGNOSD_AUTH_API_TOKENS": SECRET})
    load_settings(None, BASE | {"DIAGNOSD_SERVER_HOST": "::", "DIAGNOSD_AUTH_ALLOW_ANONYMOUS": "true"})


def test_settings_are_checked_against_the_rules() -> None:
    env = BASE | {
        "DIAGNOSD_RULES_DIR": str(RULES),
        "DIAGNOSD_WEBHOOK_ALERTNAME_MAP": '{"A": "ttft_high"}',
        "DIAGNOSD_SCHEDULER_SYMPTOMS": "queue_backlog,nope",
        "DIAGNOSD_PARAMS": '{"queue_backlog": {"waiting": "lots", "missing": 1}, "other": {}}',
    }
    with pytest.raises(SettingsError) as caught:
        compose.build(load_settings(None, env), registry=CollectorRegistry())
    found = problems(caught.value)
    assert "settings: webhook.alertname_map.A: unknown symptom 'ttft_high' (known: queue_backlog, kv_hit_low)" in found
    assert any(p.startswith("settings: scheduler.symptoms: unknown symptom 'nope'") for p in found)
    assert any(p.startswith("settings: params.other: unknown symptom") for p in found)
    assert any(p.startswith("settings: params.queue_backlog.") for p in found)


def test_every_variable_is_named_after_its_setting() -> None:
    names = env_names()
    assert names["DIAGNOSD_PROMETHEUS_URL"] == ("prometheus", "url")
    assert names["DIAGNOSD_FINDINGS_FOR"] == ("findings", "for")
    assert names["DIAGNOSD_RULES_DIR"] == ("rules_dir",)
    assert names["DIAGNOSD_AUTH_API_TOKENS_FILE"] == ("auth", "api_tokens_file")
    assert len(set(names.values())) == len(names)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("1h30m", 5400), ("1d", 86400), ("250ms", 0.25)])
def test_durations_read_and_print_the_prometheus_way(text: str, seconds: float) -> None:
    s = load_settings(None, BASE | {"DIAGNOSD_PROMETHEUS_TIMEOUT": text})
    assert s.prometheus.timeout == timedelta(seconds=seconds)
    assert format_duration(s.prometheus.timeout) == text


def test_the_prometheus_stack_is_aiohttp_unless_set_and_reaches_the_client() -> None:
    assert load_settings(None, BASE).prometheus.config().stack == "aiohttp"
    chosen = load_settings(None, BASE | {"DIAGNOSD_PROMETHEUS_STACK": "httpx"}).prometheus.config()
    assert chosen.stack == "httpx"
    with pytest.raises(SettingsError, match=r"prometheus\.stack"):
        load_settings(None, BASE | {"DIAGNOSD_PROMETHEUS_STACK": "curl"})
