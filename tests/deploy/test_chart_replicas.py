"""The chart's replicas mode, rendered by Helm's own engine: replicaCount > 1 only with the PostgreSQL
store's URL from a Secret (the render fails, saying so, otherwise), no store volume or claim then,
and an optional PodDisruptionBudget that can never block every drain."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from diagnosd.daemon.settings.loader import env_names
from tests.deploy import chart
from tests.deploy.test_chart_render import MINIMAL, env, with_

STORE_URL = "postgresql://diagnosd:pw-0123456789@postgres.db.svc:5432/diagnosd?sslmode=require"
REPLICAS: dict[str, Any] = with_(
    MINIMAL, replicaCount=3, secrets={"apiTokens": [chart.API_TOKEN], "storeUrl": STORE_URL}
)


def test_replicas_read_the_postgresql_url_from_the_secret_and_mount_no_store() -> None:
    manifests = chart.render(REPLICAS)
    deployment = chart.one(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate"}
    variables = env(manifests)
    assert variables["DIAGNOSD_STORE_URL_FILE"] == "/etc/diagnosd/secrets/store-url"
    assert "DIAGNOSD_STORE_PATH" not in variables  # diagnosd refuses a path and a URL both
    assert set(variables) <= set(env_names())
    data = chart.one(manifests, "Secret")["data"]
    assert base64.b64decode(data["store-url"]).decode() == STORE_URL
    # Never in the ConfigMap or the pod spec: only in the Secret.
    assert all(STORE_URL not in str(m) for m in manifests if m["kind"] != "Secret")
    pod = deployment["spec"]["template"]["spec"]
    assert "store" not in {v["name"] for v in pod["volumes"]}
    assert "/var/lib/diagnosd" not in {m["mountPath"] for m in chart.container(manifests)["volumeMounts"]}
    assert "PersistentVolumeClaim" not in chart.kinds(manifests)


def test_an_existing_secret_may_hold_the_url() -> None:
    values = with_(
        MINIMAL,
        replicaCount=2,
        secrets={"existingSecret": "diagnosd-db", "existingSecretKeys": ["api-tokens", "store-url"]},
    )
    manifests = chart.render(values)
    assert chart.one(manifests, "Deployment")["spec"]["replicas"] == 2
    assert env(manifests)["DIAGNOSD_STORE_URL_FILE"] == "/etc/diagnosd/secrets/store-url"
    secret = next(
        v for v in chart.one(manifests, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "secrets"
    )
    assert secret["secret"]["secretName"] == "diagnosd-db"
    assert {"key": "store-url", "path": "store-url"} in secret["secret"]["items"]


def test_one_replica_on_sqlite_is_as_before() -> None:
    deployment = chart.one(chart.render(MINIMAL), "Deployment")
    assert (deployment["spec"]["replicas"], deployment["spec"]["strategy"]) == (1, {"type": "Recreate"})
    assert "PodDisruptionBudget" not in chart.kinds(chart.render(MINIMAL))


def test_the_disruption_budget_is_optional_and_keeps_a_replica() -> None:
    manifests = chart.render(with_(REPLICAS, podDisruptionBudget={"enabled": True, "minAvailable": 2}))
    budget = chart.one(manifests, "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 2
    assert (
        budget["spec"]["selector"]["matchLabels"]
        == chart.one(manifests, "Deployment")["spec"]["selector"]["matchLabels"]
    )


def test_the_replicas_install_is_valid_kubernetes() -> None:
    validate = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    for manifest in chart.render(with_(REPLICAS, podDisruptionBudget={"enabled": True, "minAvailable": 1})):
        validate.validate(manifest, "1.29.0", strict=True)
    helm = chart.helm()
    report = helm.lint(str(chart.CHART), REPLICAS, strict=True)
    assert report["errors"] == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (with_(MINIMAL, replicaCount=2), r"replicaCount=2 needs the PostgreSQL store: replicas cannot share a SQLite"),
        (
            with_(MINIMAL, replicaCount=2, secrets={"existingSecret": "x", "existingSecretKeys": ["api-tokens"]}),
            "list store-url in secrets.existingSecretKeys",
        ),
        (with_(REPLICAS, persistence={"enabled": True}), "persistence.enabled is for the SQLite store"),
        (
            with_(REPLICAS, podDisruptionBudget={"enabled": True, "minAvailable": 3}),
            "no drain could ever take a pod",
        ),
    ],
    ids=["no-store-url", "existing-secret-without-url", "persistence-with-postgres", "budget-blocks-drains"],
)
def test_refuses_replicas_that_could_not_work(values: dict[str, Any], message: str) -> None:
    helm = chart.helm()
    with pytest.raises(helm.HelmRenderError, match=message):
        chart.render(values)
