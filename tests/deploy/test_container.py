"""The container as the chart and the Dockerfile define it, run here: its settings file, variables,
secret files and arguments start diagnosd; its probes, scrape token and the Alertmanager example's
webhook credentials work against a real Prometheus and a real Alertmanager.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from diagnosd.promlocal import free_port, stop
from tests.conftest import StartPrometheus
from tests.deploy import chart, pod
from tests.serving import run_alertmanager, wait_until

MASK = "**********"


def test_the_pods_command_settings_and_files_pass_serve_check(tmp_path: Path) -> None:
    """`serve --check`: the settings from the ConfigMap, variables, secret files and flags, with the rules and store."""
    laid = pod.lay_out(chart.render(chart.FULL), tmp_path)
    done = subprocess.run(
        [*laid.argv, "--check"], env=laid.env, cwd=laid.cwd, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["server"]["host"] == "0.0.0.0"  # off loopback, accepted because credentials are set
    assert shown["server"]["port"] == 8080
    assert shown["prometheus"]["url"] == chart.FULL["config"]["prometheus"]["url"]
    assert shown["prometheus"]["headers"] == {"X-Scope-OrgID": "tenant-a"}
    assert shown["prometheus"]["bearer_token"] == MASK
    assert shown["auth"]["api_tokens"] == [MASK, MASK]
    assert shown["auth"]["webhook_tokens"] == [MASK]
    assert Path(shown["store"]["path"]) == laid.host("/var/lib/diagnosd/diagnosd.db")
    assert Path(shown["rules_dir"]) == laid.host("/etc/diagnosd/rules")
    assert laid.host("/var/lib/diagnosd/diagnosd.db").exists()  # the store opened on the volume
    for secret in (chart.API_TOKEN, chart.WEBHOOK_TOKEN, chart.PROMETHEUS_TOKEN):
        assert secret not in done.stdout + done.stderr


@contextmanager
def running(laid: pod.Pod, port: int, log: Path) -> Iterator[str]:
    """`diagnosd serve` as the pod runs it, but on loopback (tests never listen elsewhere)."""
    argv = list(laid.argv)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=laid.env, cwd=laid.cwd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: process.poll() is not None or _answers(f"{url}/healthz"), 30, "diagnosd to listen")
        assert process.poll() is None, log.read_text()
        yield url
    finally:
        stop(process)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def example_for(url: str, token_file: Path) -> dict[str, Any]:
    """The Alertmanager example with only where diagnosd is, the token file and the wait changed."""
    config: dict[str, Any] = yaml.safe_load(chart.ALERTMANAGER_EXAMPLE.read_text())
    receiver = next(r for r in config["receivers"] if r["name"] == "diagnosd")
    hook = receiver["webhook_configs"][0]
    hook["url"] = re.sub(r"^http://[^/]+", url, hook["url"])
    hook["http_config"]["authorization"]["credentials_file"] = str(token_file)
    route = next(r for r in config["route"]["routes"] if r["receiver"] == "diagnosd")
    route["group_wait"] = "0s"
    return config


def deliveries(metrics: str, outcome: str) -> float:
    found = re.search(rf'^diagnosd_webhook_deliveries_total\{{outcome="{outcome}"\}} (\S+)$', metrics, re.M)
    return float(found.group(1)) if found else 0.0


def test_probes_scrape_token_and_alertmanager_example_work_end_to_end(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    prometheus = start_prometheus()
    values = chart.FULL | {"config": {"prometheus": {"url": prometheus.url}, "scheduler": {"enabled": False}}}
    manifests = chart.render(values)
    laid = pod.lay_out(manifests, tmp_path / "pod")
    main = chart.container(manifests)
    monitor = chart.one(manifests, "ServiceMonitor")["spec"]["endpoints"][0]
    credentials = monitor["authorization"]["credentials"]
    token = pod.secret_files(manifests, credentials["name"])[credentials["key"]].decode()
    scrape = {"Authorization": f"Bearer {token}"}
    with running(laid, free_port(), tmp_path / "diagnosd.log") as url:
        # Kubernetes' probes: liveness at once, readiness once Prometheus answers.
        assert httpx.get(url + main["livenessProbe"]["httpGet"]["path"]).status_code == 200
        ready = httpx.get(url + main["readinessProbe"]["httpGet"]["path"], timeout=10)
        assert ready.status_code == 200, ready.text
        # The ServiceMonitor's scrape: with its token, and refused without.
        assert httpx.get(url + monitor["path"]).status_code == 401
        assert httpx.get(url + monitor["path"], headers=scrape).status_code == 200
        assert httpx.post(url + "/webhook/alertmanager", json={}).status_code == 401
        # Alertmanager with the example's route and receiver, presenting the chart's webhook token.
        token_file = tmp_path / "webhook-token"
        token_file.write_text(chart.WEBHOOK_TOKEN + "\n")
        with run_alertmanager(tmp_path / "alertmanager", example_for(url, token_file)) as am:
            alert = {
                "labels": {
                    "alertname": "DiagnosdQueueBacklog",
                    "symptom": "queue_backlog",
                    "namespace": "prod",
                    "pod": "vllm-0",
                },
                "startsAt": datetime.now(UTC).isoformat(),
            }
            assert httpx.post(f"{am}/api/v2/alerts", json=[alert]).status_code == 200

            def delivered() -> str | None:
                text = httpx.get(url + "/metrics", headers=scrape).text
                return text if deliveries(text, "accepted") or deliveries(text, "unauthorized") > 1 else None

            metrics = wait_until(delivered, 15, "Alertmanager's delivery to reach diagnosd")
        assert deliveries(metrics, "unauthorized") == 1  # our own unauthenticated POST above
        assert deliveries(metrics, "accepted") == 1, (tmp_path / "diagnosd.log").read_text()
