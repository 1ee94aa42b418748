"""The Helm chart under test: its files, the `.Values` paths and DIAGNOSD_* names its templates use,
and rendering through Helm's own Go engine (helm-python-sdk, when installed; no helm binary here).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

CHART = REPO / "helm" / "diagnosd"
TEMPLATES = CHART / "templates"
FILES = CHART / "files"
ALERT_RULES = FILES / "symptom-alerts.yml"
ALERTMANAGER_EXAMPLE = FILES / "alertmanager-example.yml"

VALUES_REF = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
ENV_NAME = re.compile(r"\bDIAGNOSD_[A-Z0-9_]*[A-Z0-9]\b")

RELEASE = "diagnosd"
NAMESPACE = "monitoring"
API_TOKEN = "api-token-0123456789abcdef"
SECOND_API_TOKEN = "api-token-fedcba9876543210"
WEBHOOK_TOKEN = "hook-token-0123456789abcdef"
PROMETHEUS_TOKEN = "prometheus-token-0123456789"

# Every optional part on: what the richest install renders.
FULL: dict[str, Any] = {
    "config": {
        "prometheus": {"url": "http://mimir.example:8080/prometheus", "headers": {"X-Scope-OrgID": "tenant-a"}},
        "webhook": {"alertname_map": {"VLLMHighQueue": "queue_backlog"}},
    },
    "secrets": {
        "apiTokens": [API_TOKEN, SECOND_API_TOKEN],
        "webhookTokens": [WEBHOOK_TOKEN],
        "prometheusBearerToken": PROMETHEUS_TOKEN,
    },
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "persistence": {"enabled": True},
    "rules": {"configMap": "diagnosd-rules"},
}


def values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return data


def metadata() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return data


def template_texts() -> Iterator[tuple[Path, str]]:
    for path in sorted(TEMPLATES.iterdir()):
        yield path, path.read_text()


def value_refs() -> set[tuple[str, ...]]:
    """Every `.Values.a.b.c` path the templates read, as ('a', 'b', 'c')."""
    return {tuple(m.group(1).strip(".").split(".")) for _, text in template_texts() for m in VALUES_REF.finditer(text)}


def env_names_used() -> set[str]:
    """Every DIAGNOSD_* name written in the templates."""
    return {m.group(0) for _, text in template_texts() for m in ENV_NAME.finditer(text)}


def has_path(data: Any, path: tuple[str, ...]) -> bool:
    for part in path:
        if not isinstance(data, Mapping) or part not in data:
            return False
        data = data[part]
    return True


def helm() -> ModuleType:
    module: ModuleType = pytest.importorskip(
        "helm_python",
        reason="helm-python-sdk (Helm's Go engine as a library) renders the chart; pip install helm-python-sdk",
    )
    return module


def render(overrides: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The manifests `helm template` would print for these values (NOTES.txt left out)."""
    with helm().Chart.load(str(CHART)) as chart:
        out: dict[str, str] = chart.render(dict(overrides or {}), name=RELEASE, namespace=NAMESPACE)
    return [
        doc for name, text in sorted(out.items()) if name.endswith(".yaml") for doc in yaml.safe_load_all(text) if doc
    ]


def notes(overrides: Mapping[str, Any] | None = None) -> str:
    with helm().Chart.load(str(CHART)) as chart:
        out: dict[str, str] = chart.render(dict(overrides or {}), name=RELEASE, namespace=NAMESPACE)
    return next(text for name, text in out.items() if name.endswith("NOTES.txt"))


def one(manifests: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [m for m in manifests if m["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def kinds(manifests: list[dict[str, Any]]) -> list[str]:
    return sorted(m["kind"] for m in manifests)


def container(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    found: dict[str, Any] = next(c for c in pod["containers"] if c["name"] == "diagnosd")
    return found
