"""`diagnosd serve` as a real process: it serves, stops cleanly on SIGTERM, refuses bad settings
with a clear message (no traceback), and never logs a secret."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from diagnosd.promlocal import free_port
from tests.serving import HOOK_TOKEN, RULES, TOKEN, fleet_prometheus, wait_until

REPO = Path(__file__).resolve().parents[2]
QUERY_SECRET = "query-secret-0123456789abcdef"


@pytest.fixture(scope="module")
def fleet_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fleet_prometheus(tmp_path_factory.mktemp("fleet-prometheus")) as url:
        yield url


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "diagnosd", "--rules", str(RULES), "serve", *args]


def environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAGNOSD_")}
    return env | extra


def test_serve_answers_and_stops_on_sigterm(fleet_url: str, tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "diagnosd.yaml"
    config.write_text(
        f"store: {{path: {tmp_path / 'findings.db'}}}\nscheduler: {{interval: 1s}}\nfindings: {{for: 0s}}\n"
    )
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = environ(DIAGNOSD_PROMETHEUS_URL=fleet_url, DIAGNOSD_AUTH_API_TOKENS_FILE=str(token_file))
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        command("--config", str(config), "--port", str(port)), env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                assert process.poll() is None, (tmp_path / "serve.log").read_text()
                return False

        wait_until(healthy, 20, "diagnosd serve to answer /healthz")
        ready = httpx.get(f"{url}/readyz", timeout=5)
        symptoms = httpx.get(f"{url}/symptoms", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
        anonymous = httpx.get(f"{url}/symptoms", timeout=5)
        # A client that puts its token in the URL: refused, and the token stays out of the access log.
        in_query = httpx.get(f"{url}/findings", params={"access_token": QUERY_SECRET}, timeout=5)
        wait_until(
            lambda: (
                "diagnosd_rounds_total"
                in httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
            ),
            10,
            "a first round",
        )
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=15)
        log.close()
    output = (tmp_path / "serve.log").read_text()
    assert ready.status_code == 200
    assert [s["id"] for s in symptoms.json()] == ["queue_backlog", "kv_hit_low"]
    assert anonymous.status_code == 401
    assert in_query.status_code == 401
    assert '"GET /findings?[redacted] HTTP/1.1" 401' in output
    assert QUERY_SECRET not in output
    # uvicorn shuts the app down, then re-raises the signal so the exit status tells it
    assert code in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in output
    assert f"serving on http://127.0.0.1:{port}" in output
    assert "Traceback" not in output
    assert TOKEN not in output


def test_bad_settings_exit_2_with_every_problem(tmp_path: Path) -> None:
    env = environ(DIAGNOSD_PROMETHEUS_URL="prometheus:9090", DIAGNOSD_SCHEDULER_INTERVAL="often")
    done = subprocess.run(command("--port", "0"), env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert done.returncode == 2
    assert "DIAGNOSD_PROMETHEUS_URL: prometheus.url: expected http(s)://host[:port][/path]" in done.stderr
    assert "DIAGNOSD_SCHEDULER_INTERVAL: scheduler.interval: 'often' is not a duration" in done.stderr
    assert "server.port" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_unusable_store_stops_before_serving(tmp_path: Path) -> None:
    bad = tmp_path / "store.db"
    bad.write_text("this is not sqlite " * 100)
    env = environ(DIAGNOSD_PROMETHEUS_URL="http://127.0.0.1:9", DIAGNOSD_STORE_PATH=str(bad))
    done = subprocess.run(command("--check"), env=env, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert done.returncode == 2
    assert f"findings store {bad}: not a usable diagnosd store" in done.stderr
    assert "Traceback" not in done.stderr


def test_check_prints_the_settings_with_secrets_masked(tmp_path: Path) -> None:
    env = environ(
        DIAGNOSD_PROMETHEUS_URL="http://127.0.0.1:9",
        DIAGNOSD_PROMETHEUS_BEARER_TOKEN=TOKEN,
        DIAGNOSD_STORE_PATH=str(tmp_path / "x.db"),
    )
    done = subprocess.run(command("--check", "--port", "9123"), env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert '"port": 9123' in done.stdout
    assert '"bearer_token": "**********"' in done.stdout
    assert TOKEN not in done.stdout + done.stderr


def test_off_loopback_a_webhook_token_alone_is_refused_naming_the_open_endpoints(tmp_path: Path) -> None:
    env = environ(
        DIAGNOSD_PROMETHEUS_URL="http://127.0.0.1:9",
        DIAGNOSD_STORE_PATH=str(tmp_path / "x.db"),
        DIAGNOSD_AUTH_WEBHOOK_TOKENS=HOOK_TOKEN,
    )
    # --check runs the same settings check as serving, without listening on 0.0.0.0.
    done = subprocess.run(command("--check", "--host", "0.0.0.0"), env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    [refusal] = [line for line in done.stderr.splitlines() if "refusing to serve on 0.0.0.0" in line]
    for path in ("/diagnose", "/triage", "/symptoms", "/findings", "/metrics"):
        assert path in refusal
    assert "(set auth.api_tokens)" in refusal
    assert "/webhook/alertmanager" not in refusal  # its token closes it
    assert HOOK_TOKEN not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_off_loopback_api_and_webhook_tokens_are_enough(tmp_path: Path) -> None:
    env = environ(
        DIAGNOSD_PROMETHEUS_URL="http://127.0.0.1:9",
        DIAGNOSD_STORE_PATH=str(tmp_path / "x.db"),
        DIAGNOSD_AUTH_API_TOKENS=TOKEN,
        DIAGNOSD_AUTH_WEBHOOK_TOKENS=HOOK_TOKEN,
    )
    done = subprocess.run(command("--check", "--host", "0.0.0.0"), env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert '"host": "0.0.0.0"' in done.stdout
