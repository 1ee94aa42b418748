"""`diagnosd serve` stopped by SIGTERM while Prometheus hangs (a loopback socket that takes
connections and never answers): it exits well within Kubernetes' 30s grace, the request in flight
gets its answer, and the alert being diagnosed stays in the store to be tried again."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx

from diagnosd.daemon.alertmanager.memory import DeliveryMemory
from diagnosd.promlocal import free_port, stop
from diagnosd.storage import open_database
from tests.cli.test_serve import REPO, command, environ
from tests.serving import HOOK_TOKEN, SAMPLES, TOKEN, wait_until

KUBERNETES_GRACE = 30


def test_sigterm_with_prometheus_hanging_exits_in_bounded_time(tmp_path: Path) -> None:
    # The kernel completes connections to a listening socket by itself: with nobody accepting,
    # every request is sent and no answer ever comes.
    with socket.create_server(("127.0.0.1", 0), backlog=64) as hanging:
        heard = _Hanging(hanging)
        prometheus = f"http://127.0.0.1:{hanging.getsockname()[1]}"
        port = free_port()
        store = tmp_path / "findings.db"
        config = tmp_path / "diagnosd.yaml"
        config.write_text(
            json.dumps(
                {
                    # Without the deadline, one query alone would take 3 x 10s here.
                    "prometheus": {"url": prometheus, "timeout": "10s", "retries": 2, "diagnosis_deadline": "2s"},
                    "store": {"path": str(store)},
                    "scheduler": {"enabled": False},
                    "webhook": {"alertname_map": {"VLLMQueueBacklog": "queue_backlog"}, "coalesce_window": "0s"},
                    "auth": {"api_tokens": [TOKEN], "webhook_tokens": [HOOK_TOKEN]},
                }
            )
        )
        log = (tmp_path / "serve.log").open("wb")
        process = subprocess.Popen(
            command("--config", str(config), "--port", str(port)),
            env=environ(),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        log.close()
        url = f"http://127.0.0.1:{port}"
        answers: list[httpx.Response] = []
        try:
            wait_until(lambda: process.poll() is not None or _healthy(url), 20, "diagnosd serve to answer /healthz")
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            alert = json.loads((SAMPLES / "webhook-received.json").read_text())
            hook = {"Authorization": f"Bearer {HOOK_TOKEN}"}
            asking = threading.Thread(target=lambda: answers.append(_diagnose(url)))
            asking.start()
            # The REST diagnosis (unscoped) waits on the hanging Prometheus; then the alert comes.
            wait_until(lambda: heard.unscoped() or bool(answers), 20, "the REST diagnosis to query Prometheus")
            accepted = httpx.post(f"{url}/webhook/alertmanager", json=alert, headers=hook, timeout=5)
            began = time.monotonic()
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=KUBERNETES_GRACE + 10)
            took = time.monotonic() - began
            asking.join(timeout=10)
        finally:
            stop(process)
    output = (tmp_path / "serve.log").read_text()
    assert accepted.status_code == 202
    assert took < KUBERNETES_GRACE, output
    # uvicorn shuts the app down, then re-raises the signal so the exit status tells it
    assert code in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output
    assert "Traceback" not in output
    assert [(a.status_code, a.json()["error"]) for a in answers] == [(504, "prometheus_timeout")]
    database = open_database(store)
    try:
        memory = DeliveryMemory(database)
        kept = [r.key[0] for outcome in ("queued", "failed") for r in memory.alerts_by_outcome(outcome)]
    finally:
        database.close()
    assert kept == ["0d6ac019b0dad439"]  # owed a diagnosis still: retried at the next start


class _Hanging:
    """Takes every connection and reads its request, never answering; remembers what it heard."""

    def __init__(self, server: socket.socket) -> None:
        self.requests: list[bytes] = []
        self._server = server
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:  # the listening socket closed: the test is over
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(60)
            try:
                while data := conn.recv(65536):
                    self.requests.append(data)
            except OSError:
                return

    def unscoped(self) -> bool:
        """A query without the alert's pod matcher: the REST diagnosis over the whole fleet."""
        return any(b"query=" in r and b"vllm-0" not in r for r in self.requests)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _diagnose(url: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.get(f"{url}/diagnose/queue_backlog", headers=headers, timeout=KUBERNETES_GRACE + 10)
