"""The Alertmanager example's routing of derived alerts, on amtool and on a real Alertmanager 0.25
loaded with the file itself: DiagnosdRootCause never goes back to diagnosd's webhook; it shares
one group with the symptom alert of its target; a critical root cause inhibits the lesser ones of
the same symptom and target, and never the symptom alert.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.deploy import chart
from tests.deploy.test_alert_files import routes_test
from tests.serving import run_alertmanager, wait_until

TARGET = {"namespace": "prod", "pod": "vllm-0"}
SYMPTOM = {"alertname": "DiagnosdQueueBacklog", "symptom": "queue_backlog", "severity": "warning", **TARGET}


def derived(cause: str, severity: str, **target: str) -> dict[str, str]:
    labels = {"alertname": "DiagnosdRootCause", "symptom": "queue_backlog", "cause": cause, "severity": severity}
    return {**labels, **(target or TARGET)}


@pytest.mark.parametrize(
    ("labels", "receivers"),
    [
        (derived("kv_pool_full", "critical"), "default"),
        (SYMPTOM, "diagnosd,default"),
    ],
    ids=["derived-alert", "symptom-alert"],
)
def test_derived_alerts_never_route_back_to_diagnosd(labels: dict[str, str], receivers: str) -> None:
    done = routes_test([f"{k}={v}" for k, v in labels.items()], receivers)
    assert done.returncode == 0, done.stdout + done.stderr


def post(am: str, *alerts: dict[str, str]) -> None:
    now = datetime.now(UTC).isoformat()
    body = [{"labels": labels, "startsAt": now} for labels in alerts]
    httpx.post(f"{am}/api/v2/alerts", json=body, timeout=5).raise_for_status()


def get(am: str, path: str) -> Any:
    answer = httpx.get(f"{am}/api/v2/{path}", timeout=5)
    answer.raise_for_status()
    return answer.json()


def test_the_example_groups_a_root_cause_with_its_symptom_and_inhibits_lesser_causes(tmp_path: Path) -> None:
    example = yaml.safe_load(chart.ALERTMANAGER_EXAMPLE.read_text())
    critical, lesser = derived("kv_pool_full", "critical"), derived("prompt_inflation", "warning")
    elsewhere = derived("prompt_inflation", "warning", namespace="prod", pod="vllm-1")
    with run_alertmanager(tmp_path / "am", example) as am:
        post(am, SYMPTOM, critical, lesser, elsewhere)

        def people_group() -> list[dict[str, Any]] | None:
            groups = [g for g in get(am, "alerts/groups") if g["labels"] == TARGET]
            return groups[0]["alerts"] if groups and len(groups[0]["alerts"]) == 3 else None

        grouped = wait_until(people_group, 20, "the symptom and its root causes in one group")

        def states() -> dict[str, dict[str, Any]] | None:
            alerts = {
                f"{a['labels']['alertname']}/{a['labels'].get('cause', '')}/{a['labels']['pod']}": a["status"]
                for a in get(am, "alerts")
            }
            return alerts if alerts["DiagnosdRootCause/prompt_inflation/vllm-0"]["inhibitedBy"] else None

        status = wait_until(states, 20, "the critical root cause to inhibit the lesser one")
    assert sorted(a["labels"]["alertname"] for a in grouped) == ["DiagnosdQueueBacklog", *["DiagnosdRootCause"] * 2]
    assert status["DiagnosdRootCause/prompt_inflation/vllm-0"]["state"] == "suppressed"
    assert status["DiagnosdRootCause/kv_pool_full/vllm-0"]["state"] == "active"
    assert status["DiagnosdQueueBacklog//vllm-0"] == {"state": "active", "silencedBy": [], "inhibitedBy": []}
    # Another target's lesser cause is not the critical cause's business.
    assert status["DiagnosdRootCause/prompt_inflation/vllm-1"]["state"] == "active"
