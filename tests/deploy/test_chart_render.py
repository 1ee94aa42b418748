"""The chart rendered by Helm's own engine (helm-python-sdk): lint, valid Kubernetes objects, every
option's effect, and the refusals that stop a release diagnosd would not start with.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest
import yaml

from diagnosd.daemon.settings.loader import env_names
from tests.deploy import chart, dockerfile

MINIMAL: dict[str, Any] = {
    "config": {"prometheus": {"url": "http://prometheus:9090"}},
    "secrets": {"apiTokens": [chart.API_TOKEN]},
}
CORE_KINDS = ["ConfigMap", "Deployment", "Secret", "Service", "ServiceAccount"]


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """`base` with top-level sections replaced (deep copy, so the module constants stay)."""
    out = copy.deepcopy(base)
    out.update(copy.deepcopy(changes))
    return out


def secret_data(manifests: list[dict[str, Any]]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in chart.one(manifests, "Secret")["data"].items()}


def env(manifests: list[dict[str, Any]]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in chart.container(manifests)["env"]}


def volume(manifests: list[dict[str, Any]], name: str) -> dict[str, Any]:
    volumes = chart.one(manifests, "Deployment")["spec"]["template"]["spec"]["volumes"]
    found: dict[str, Any] = next(v for v in volumes if v["name"] == name)
    return found


def test_helm_lint_is_clean() -> None:
    helm = chart.helm()
    for values in (chart.FULL, MINIMAL):
        report = helm.lint(str(chart.CHART), values, strict=True)
        assert report["errors"] == []
        assert [m for m in report["messages"] if m["severity"] > 1] == []


def test_the_full_install_renders_valid_kubernetes_objects() -> None:
    validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    manifests = chart.render(chart.FULL)
    assert chart.kinds(manifests) == sorted([*CORE_KINDS, "PersistentVolumeClaim", "PrometheusRule", "ServiceMonitor"])
    for manifest in manifests:
        if manifest["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: no schema shipped with kubernetes-validate
        validate.validate(manifest, "1.29.0", strict=True)


def test_a_minimal_install_has_no_optional_parts() -> None:
    manifests = chart.render(MINIMAL)
    assert chart.kinds(manifests) == CORE_KINDS
    assert volume(manifests, "store") == {"name": "store", "emptyDir": {}}


def test_the_pod_runs_as_the_images_user_on_a_read_only_root() -> None:
    manifests = chart.render(MINIMAL)
    pod = chart.one(manifests, "Deployment")["spec"]["template"]["spec"]
    main = chart.container(manifests)
    uid, _, gid = dockerfile.stages()[-1].all("USER")[-1].text.partition(":")
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (int(uid), int(gid))
    assert main["securityContext"]["readOnlyRootFilesystem"] is True
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["automountServiceAccountToken"] is False
    writable = {m["mountPath"] for m in main["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/var/lib/diagnosd", "/tmp"}
    assert env(manifests)["DIAGNOSD_STORE_PATH"].startswith("/var/lib/diagnosd/")


def test_probes_and_port() -> None:
    main = chart.container(chart.render(MINIMAL))
    assert main["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert main["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    # /readyz waits up to 5s for Prometheus: the probe must wait longer.
    assert main["readinessProbe"]["timeoutSeconds"] > 5
    assert main["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert main["args"] == ["serve", "--config", "/etc/diagnosd/config.yaml", "--host", "0.0.0.0", "--port", "8080"]


def test_the_config_map_holds_the_config_value_as_yaml() -> None:
    manifests = chart.render(chart.FULL)
    config = yaml.safe_load(chart.one(manifests, "ConfigMap")["data"]["config.yaml"])
    assert config["prometheus"]["url"] == chart.FULL["config"]["prometheus"]["url"]
    assert config["prometheus"]["headers"] == {"X-Scope-OrgID": "tenant-a"}
    assert config["webhook"]["alertname_map"] == {"VLLMHighQueue": "queue_backlog"}
    assert config["scheduler"]["interval"] == chart.values()["config"]["scheduler"]["interval"]
    text = chart.one(manifests, "ConfigMap")["data"]["config.yaml"]
    assert chart.API_TOKEN not in text
    assert chart.PROMETHEUS_TOKEN not in text


def test_secrets_are_files_named_by_diagnosd_file_variables() -> None:
    manifests = chart.render(chart.FULL)
    data = secret_data(manifests)
    assert data["api-tokens"].splitlines() == [chart.API_TOKEN, chart.SECOND_API_TOKEN]
    assert data["webhook-tokens"] == chart.WEBHOOK_TOKEN
    assert data["prometheus-bearer-token"] == chart.PROMETHEUS_TOKEN
    variables = env(manifests)
    assert variables["DIAGNOSD_AUTH_API_TOKENS_FILE"] == "/etc/diagnosd/secrets/api-tokens"
    assert variables["DIAGNOSD_AUTH_WEBHOOK_TOKENS_FILE"] == "/etc/diagnosd/secrets/webhook-tokens"
    assert variables["DIAGNOSD_PROMETHEUS_BEARER_TOKEN_FILE"] == "/etc/diagnosd/secrets/prometheus-bearer-token"
    items = {i["key"] for i in volume(manifests, "secrets")["secret"]["items"]}
    assert items == {"api-tokens", "webhook-tokens", "prometheus-bearer-token"}
    for secret in (chart.API_TOKEN, chart.WEBHOOK_TOKEN, chart.PROMETHEUS_TOKEN):
        assert all(secret not in value for value in variables.values())


@pytest.mark.parametrize(
    "values",
    [
        chart.FULL,
        MINIMAL,
        with_(MINIMAL, secrets={"existingSecret": "mine", "existingSecretKeys": ["api-tokens", "webhook-password"]}),
        with_(
            MINIMAL,
            secrets={
                "apiTokens": [chart.API_TOKEN],
                "webhookPassword": "hook-password-0123456789",
                "prometheusPassword": "prometheus-password",
            },
        ),
    ],
    ids=["full", "minimal", "existing-secret", "passwords"],
)
def test_every_variable_the_chart_sets_is_one_the_settings_loader_knows(values: dict[str, Any]) -> None:
    names = set(env(chart.render(values)))
    assert "DIAGNOSD_STORE_PATH" in names
    assert sorted(names - set(env_names())) == []


def test_an_existing_secret_replaces_the_charts() -> None:
    values = with_(
        MINIMAL,
        secrets={"existingSecret": "diagnosd-auth", "existingSecretKeys": ["api-tokens", "scrape-token"]},
        serviceMonitor={"enabled": True},
    )
    manifests = chart.render(values)
    assert "Secret" not in chart.kinds(manifests)
    source = volume(manifests, "secrets")["secret"]
    assert source["secretName"] == "diagnosd-auth"
    assert [i["key"] for i in source["items"]] == ["api-tokens"]  # scrape-token is Prometheus', not diagnosd's
    assert "DIAGNOSD_AUTH_API_TOKENS_FILE" in env(manifests)
    endpoint = chart.one(manifests, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["authorization"]["credentials"] == {"name": "diagnosd-auth", "key": "scrape-token"}


def test_the_service_monitor_scrapes_metrics_with_an_api_token() -> None:
    manifests = chart.render(chart.FULL)
    monitor = chart.one(manifests, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"]["matchLabels"] == chart.one(manifests, "Service")["spec"]["selector"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    credentials = endpoint["authorization"]["credentials"]
    secret = chart.one(manifests, "Secret")
    assert credentials["name"] == secret["metadata"]["name"]
    assert secret_data(manifests)[credentials["key"]] in secret_data(manifests)["api-tokens"].splitlines()


def test_the_prometheus_rule_is_the_generated_file() -> None:
    rule = chart.one(chart.render(chart.FULL), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    symptoms = yaml.safe_load(chart.ALERT_RULES.read_text())["groups"]
    assert rule["spec"]["groups"][: len(symptoms)] == symptoms  # then diagnosd-self (test_self_alerts.py)


def test_persistence_claims_or_reuses_a_volume() -> None:
    manifests = chart.render(chart.FULL)
    claim = chart.one(manifests, "PersistentVolumeClaim")
    assert volume(manifests, "store")["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert chart.one(manifests, "Deployment")["spec"]["strategy"]["type"] == "Recreate"
    reused = chart.render(with_(MINIMAL, persistence={"enabled": True, "existingClaim": "old-store"}))
    assert "PersistentVolumeClaim" not in chart.kinds(reused)
    assert volume(reused, "store")["persistentVolumeClaim"]["claimName"] == "old-store"


def test_custom_rules_replace_the_images() -> None:
    manifests = chart.render(chart.FULL)
    assert env(manifests)["DIAGNOSD_RULES_DIR"] == "/etc/diagnosd/rules"
    assert volume(manifests, "rules")["configMap"]["name"] == "diagnosd-rules"
    assert "DIAGNOSD_RULES_DIR" not in env(chart.render(MINIMAL))  # the image's own


def test_anonymous_only_when_asked_and_then_without_secrets() -> None:
    manifests = chart.render(
        with_(MINIMAL, secrets={}, config={"prometheus": {"url": "http://p:9090"}, "auth": {"allow_anonymous": True}})
    )
    assert "Secret" not in chart.kinds(manifests)
    assert [e for e in env(manifests) if e.endswith("_FILE")] == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "config.prometheus.url is required"),
        (with_(MINIMAL, secrets={}), "refuses to serve off loopback without credentials"),
        (with_(MINIMAL, secrets={"webhookTokens": [chart.WEBHOOK_TOKEN]}), "set secrets.apiTokens"),
        (with_(MINIMAL, secrets={"apiTokens": ["short"]}), "at least 16 characters"),
        (
            with_(MINIMAL, secrets={"existingSecret": "x", "existingSecretKeys": ["api-token"]}),
            'unknown key "api-token"',
        ),
        (
            with_(
                MINIMAL,
                secrets={"existingSecret": "x", "existingSecretKeys": ["api-tokens"]},
                serviceMonitor={"enabled": True},
            ),
            "serviceMonitor: /metrics needs an API token",
        ),
    ],
    ids=["no-url", "no-credentials", "webhook-token-only", "short-token", "unknown-key", "no-scrape-token"],
)
def test_refuses_what_diagnosd_would_refuse(values: dict[str, Any], message: str) -> None:
    helm = chart.helm()
    with pytest.raises(helm.HelmRenderError, match=message):
        chart.render(values)


def test_notes_show_the_api_and_the_webhook() -> None:
    text = chart.notes(chart.FULL)
    assert "/diagnose/ttft_high?namespace=prod" in text
    assert "/findings" in text
    assert "http://diagnosd.monitoring.svc:8080/webhook/alertmanager" in text
    assert "jsonpath='{.data.api-tokens}'" in text
