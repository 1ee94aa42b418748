"""Review of alert batches diagnosed in a process of their own (webhook.processes, offload.py):
each test runs the daemon as shipped (processes: 1) and, where the two should agree, on the event
loop (processes: 0) as the control, against a real Prometheus where the diagnosis must succeed,
or a loopback stand-in where Prometheus must misbehave in a way a real one will not on demand (a
503 with Retry-After, a query never answered). The daemon runs in-process (`serve`), or as
`python -m diagnosd serve` and the console script in a session of its own where its signals and
its death are what is tested.

What the change must keep (docs/daemon.md): one circuit for every round, alert and request; the
daemon's rules; a batch cut off at shutdown stays queued; a process that dies fails its own batch,
not the next one; no process outlives the daemon; the same self-metrics on /metrics.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from diagnosd.daemon.alertmanager.inbox import Delivery
from diagnosd.daemon.alertmanager.memory import DeliveryMemory
from diagnosd.daemon.alertmanager.offload import Offloaded
from diagnosd.daemon.compose import Services
from diagnosd.engine import Scope
from diagnosd.errors import SourceUnavailable
from diagnosd.findings.lifecycle import Trigger
from diagnosd.promlocal import free_port
from diagnosd.sources.circuit import State
from diagnosd.storage import open_database
from tests.conftest import StartPrometheus
from tests.fakes.standin import StandIn
from tests.serving import AT, RULES, build, counted, counter, fleet, sample, serve, settings, wait_until

FIRING = sample("webhook-received.json")  # vllm-0's queue backlog, from a real Alertmanager
FINGERPRINT = "0d6ac019b0dad439"
WEBHOOK = "/webhook/alertmanager"


def resolved(delivery: dict[str, Any]) -> dict[str, Any]:
    """The same alerts, resolved (same fingerprint and startsAt: the resolution of that state)."""
    out: dict[str, Any] = json.loads(json.dumps(delivery))
    out["status"] = "resolved"
    for alert in out["alerts"]:
        alert["status"] = "resolved"
        alert["endsAt"] = "2026-11-29T14:30:00Z"
    return out


def on_pod(delivery: dict[str, Any], pod: str, fingerprint: str) -> dict[str, Any]:
    """The delivery's alert moved to another pod (another alert: its own fingerprint)."""
    out: dict[str, Any] = json.loads(json.dumps(delivery))
    for alert in out["alerts"]:
        alert["labels"]["pod"] = pod
        alert["fingerprint"] = fingerprint
    return out


def outcomes(memory: DeliveryMemory) -> dict[str, list[tuple[str, str, str | None]]]:
    """Every remembered alert state by outcome: (fingerprint, status, error)."""
    found: dict[str, list[tuple[str, str, str | None]]] = {}
    for outcome in Delivery:
        records = memory.alerts_by_outcome(outcome)
        if records:
            found[str(outcome)] = [(r.key[0], r.key[1], r.error) for r in records]
    return found


def offloaded(services: Services) -> Offloaded:
    parting = services.inbox._parting
    assert isinstance(parting, Offloaded)
    return parting


# The daemon's own circuit: "Every round, alert and request reads through one circuit that lives
# as long as the daemon" (docs/daemon.md). A child's circuit of its own (compose.batch_diagnoser)
# once went unheard: an open daemon circuit did not keep batches off Prometheus, and a batch's
# failures never reached the daemon's circuit, /metrics or /readyz.


@pytest.mark.parametrize("processes", [0, 1])
async def test_an_open_circuit_keeps_alert_batches_off_a_prometheus_that_asked_for_quiet(
    tmp_path: Path, processes: int
) -> None:
    with StandIn() as prometheus:
        config = settings(prometheus.url, tmp_path, webhook={"processes": processes})
        async with serve(build(config)) as (client, services):
            # A REST diagnosis meets the 503 with Retry-After: the daemon's circuit opens for 30 s.
            tree = services.diagnoser.tree("queue_backlog")
            with pytest.raises(SourceUnavailable):
                await services.diagnoser.diagnose(tree, Scope.of({"namespace": "prod"}), None, Trigger.API)
            opened = services.source.circuit.status()
            asked = prometheus.seen
            answer = await client.post(WEBHOOK, json=FIRING)
            await services.inbox.join()
            found = outcomes(services.memory)
    assert opened.state is State.OPEN
    assert asked >= 1
    assert answer.status_code == 202
    assert [(f, s) for f, s, _ in found["failed"]] == [(FINGERPRINT, "firing")]  # retried later, both ways
    # Nothing more was sent while Prometheus asked for 30 s of quiet.
    assert prometheus.seen == asked, f"the alert batch sent {prometheus.seen - asked} requests through an open circuit"


@pytest.mark.parametrize("processes", [0, 1])
async def test_an_alert_batch_that_finds_prometheus_down_opens_the_daemons_circuit(
    tmp_path: Path, processes: int
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    config = settings(url, tmp_path, webhook={"processes": processes}, prometheus={"circuit": {"failures": 1}})
    async with serve(build(config)) as (client, services):
        await client.post(WEBHOOK, json=FIRING)
        await services.inbox.join()
        found = outcomes(services.memory)
        status = services.source.circuit.status()
        exposed = (await client.get("/metrics")).text
    assert [(f, s) for f, s, _ in found["failed"]] == [(FINGERPRINT, "firing")]
    # Counted as the daemon's own query error, both ways (the tally replays it)...
    assert counter(exposed, "diagnosd_prometheus_query_errors_total", error="unavailable") >= 1
    # ...and the one circuit (what /readyz shows, what /metrics exports) hears of it, both ways.
    assert (status.state, status.failures) == (State.OPEN, 1)
    assert counter(exposed, "diagnosd_prometheus_circuit_state") == 2
    assert counter(exposed, "diagnosd_prometheus_circuit_opened_total") == 1


# The daemon's rules: "each with the daemon's rules and settings" (docs/daemon.md). A child that
# loaded them again from disk when it started (at the first batch, after every death) diagnosed
# alerts by other rules than the daemon's rounds, REST and /symptoms once the directory was edited
# (a ConfigMap update), and failed every alert once a file there was broken.


@pytest.mark.parametrize(("processes", "edit"), [(0, "retuned"), (1, "retuned"), (1, "broken")])
async def test_alerts_are_diagnosed_by_the_rules_the_daemon_loaded(
    tmp_path: Path, start_prometheus: StartPrometheus, processes: int, edit: str
) -> None:
    prom = start_prometheus(fleet())
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules)
    config = settings(prom.url, tmp_path, rules_dir=str(rules), webhook={"processes": processes})
    async with serve(build(config)) as (client, services):
        # After the daemon started, before the first alert: its KV threshold (0.9, vllm-0 is at
        # 0.95) raised on disk, or the file broken. The daemon keeps what it loaded.
        tree_file = rules / "queue_backlog.yaml"
        text = tree_file.read_text()
        assert "kv_full: {default: 0.9," in text
        tree_file.write_text(
            text.replace("kv_full: {default: 0.9,", "kv_full: {default: 0.99,") if edit == "retuned" else "nodes: ["
        )
        kept = services.diagnoser.tree("queue_backlog").params["kv_full"].default
        answer = await client.post(WEBHOOK, json=FIRING)
        await services.inbox.join()
        found = outcomes(services.memory)
        causes = {(f.labels["pod"], f.cause) for f in services.tracker.active()}
    assert answer.status_code == 202
    assert kept == 0.9  # the daemon's own tree is the one it loaded
    assert list(found) == ["done"], found
    assert ("vllm-0", "kv_pool_full") in causes


# A process that dies "fails its batch" (docs/daemon.md): the one it was diagnosing. One that died
# idle (killed, out of memory between two batches) leaves the pool broken: the next batch, which no
# process saw, goes to the new one instead of being failed (an attempt spent, 30 s of backoff).


async def test_a_batch_sent_after_an_idle_process_died_is_diagnosed_by_the_next_process(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    prom = start_prometheus(fleet())
    config = settings(prom.url, tmp_path, webhook={"processes": 1})
    async with serve(build(config)) as (client, services):
        await client.post(WEBHOOK, json=FIRING)
        await services.inbox.join()
        [first] = offloaded(services).pids()
        os.kill(first, signal.SIGKILL)
        await asyncio.to_thread(wait_until, lambda: not alive(first), 10, "the killed process gone")
        await asyncio.sleep(0.2)  # the executor has seen it die
        await client.post(WEBHOOK, json=on_pod(FIRING, "vllm-2", "1111111111111111"))
        await services.inbox.join()
        found = outcomes(services.memory)
        pids = offloaded(services).pids()
    assert found.get("failed") is None, f"a batch no process had seen was failed: {found.get('failed')}"
    assert sorted(f for f, _, _ in found["done"]) == ["0d6ac019b0dad439", "1111111111111111"]
    assert pids
    assert first not in pids


# A resolution while the child diagnoses supersedes the firing state, and
# the self-metrics on /metrics are the loop's.


async def test_a_resolution_arriving_while_the_process_diagnoses_supersedes_the_firing_state(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    prom = start_prometheus(fleet())
    config = settings(prom.url, tmp_path, webhook={"processes": 1})
    async with serve(build(config)) as (client, services):
        await client.post(WEBHOOK, json=FIRING)
        parting = offloaded(services)
        # The batch has been handed to the process, which is still starting (a second or so).
        await asyncio.to_thread(wait_until, parting.pids, 10, "the diagnosis process started", 0.005)
        await client.post(WEBHOOK, json=resolved(FIRING))
        await services.inbox.join()
        found = outcomes(services.memory)
        linked = [f for f in services.tracker.active() if FINGERPRINT in f.alerts]
        diagnosed = counted(services.metrics.diagnoses, trigger="alert", outcome="ok")
    assert diagnosed == 1  # the process did diagnose it, after the resolution came in
    assert found == {"done": [(FINGERPRINT, "resolved", None)], "superseded": [(FINGERPRINT, "firing", None)]}
    assert linked == []


SELF_METRICS = (
    "diagnosd_diagnoses_total",
    "diagnosd_diagnosis_duration_seconds_count",
    "diagnosd_prometheus_queries_total",
    "diagnosd_prometheus_query_errors_total",
    "diagnosd_prometheus_query_duration_seconds_count",
    "diagnosd_prometheus_circuit_state",
    "diagnosd_tree_last_success_timestamp_seconds",
    "diagnosd_tree_errors_total",
    "diagnosd_finding_transitions_total",
    "diagnosd_webhook_alerts_total",
)


async def test_an_offloaded_alert_shows_on_metrics_as_one_diagnosed_on_the_loop(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    prom = start_prometheus(fleet())
    seen: dict[int, dict[str, str]] = {}
    for processes in (0, 1):
        (tmp_path / str(processes)).mkdir()
        config = settings(prom.url, tmp_path / str(processes), webhook={"processes": processes})
        async with serve(build(config)) as (client, services):
            await client.post(WEBHOOK, json=FIRING)
            await services.inbox.join()
            text = (await client.get("/metrics")).text
        seen[processes] = {
            line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1]
            for line in text.splitlines()
            if line.startswith(SELF_METRICS)
        }
    assert seen[1] == seen[0]
    assert seen[1]['diagnosd_diagnoses_total{outcome="ok",trigger="alert"}'] == "1.0"
    assert seen[1]['diagnosd_tree_last_success_timestamp_seconds{symptom="queue_backlog"}'] != "0.0"


async def test_the_processes_lines_are_written_as_the_daemons(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # the level a process takes from the daemon when it starts
    with StandIn() as prometheus:
        config = settings(prometheus.url, tmp_path, webhook={"processes": 1})
        async with serve(build(config)) as (client, services):
            await client.post(WEBHOOK, json=FIRING)
            await services.inbox.join()
            [pid] = offloaded(services).pids()
    # The process said it started, on stderr (the daemon's own records go to pytest's handler
    # here, never to the file descriptor), in the daemon's format, and the HTTP loggers kept quiet.
    err = capfd.readouterr().err.splitlines()
    lines = [line for line in err if "diagnosd.daemon.alertmanager.offload" in line]
    assert pid != os.getpid()
    assert len(lines) == 1, lines
    assert re.match(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} INFO diagnosd\.daemon\.alertmanager\.offload: "
        rf"diagnosis process {pid} started: {len(services.diagnoser.ruleset.trees)} trees, nice \+10$",
        lines[0],
    )
    assert not [line for line in err if "httpx" in line]


# The daemon's clock: a tree's last success is when its diagnosis completed, as the loop stamps it
# (Diagnoser.diagnose reads its clock at the end), not when the batch was handed over (`Ask.now`),
# which is early by the diagnosis and its wait in the pool.


async def test_a_trees_last_success_is_when_its_diagnosis_completed(
    tmp_path: Path, start_prometheus: StartPrometheus
) -> None:
    prom = start_prometheus(fleet())
    now = [AT]
    config = settings(prom.url, tmp_path, webhook={"processes": 1})
    async with serve(build(config, clock=lambda: now[0])) as (client, services):
        await client.post(WEBHOOK, json=FIRING)
        # Handed to the process, which takes a second to start: the daemon's time moves on meanwhile.
        await asyncio.to_thread(wait_until, offloaded(services).pids, 10, "the diagnosis process started", 0.005)
        now[0] = AT + timedelta(minutes=10)
        await services.inbox.join()
        diagnosed = counted(services.metrics.diagnoses, trigger="alert", outcome="ok")
        text = (await client.get("/metrics")).text
    stamp = counter(text, "diagnosd_tree_last_success_timestamp_seconds", symptom="queue_backlog")
    assert diagnosed == 1
    assert stamp == now[0].timestamp(), f"stamped {datetime.fromtimestamp(stamp, UTC)}, completed at {now[0]}"


# The daemon as launched: `python -m diagnosd serve` (the spawned process must not run the command
# line again) and the console script, each in a session of its own.


def daemon_config(tmp_path: Path, prometheus_url: str, port: int) -> Path:
    config = {
        "server": {"host": "127.0.0.1", "port": port},
        "prometheus": {"url": prometheus_url, "timeout": "30s", "retries": 0},
        "store": {"path": str(tmp_path / "findings.db")},
        "rules_dir": str(RULES),
        "scheduler": {"enabled": False},
        "findings": {"for": "0s"},
        "webhook": {"alertname_map": {"VLLMQueueBacklog": "queue_backlog"}, "coalesce_window": "0s", "processes": 1},
    }
    path = tmp_path / "diagnosd.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def in_session(sid: int) -> list[int]:
    """The live processes of session `sid` other than its leader (the daemon's children, orphaned or not)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == sid:
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def spawned(sid: int) -> list[int]:
    """The diagnosis processes of the daemon's session (multiprocessing's spawn_main; not its resource tracker)."""
    found = []
    for pid in in_session(sid):
        with suppress(FileNotFoundError, ProcessLookupError):
            if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def daemon_process(command: list[str], config: Path, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`command serve --config config` in a session of its own, up and serving; killed with every
    process of its session, by pid, whatever the test did."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAGNOSD_")}
    logged = tmp_path / "daemon.log"
    with logged.open("wb") as log:
        process = subprocess.Popen(
            [*command, "serve", "--config", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:
        port = yaml.safe_load(config.read_text())["server"]["port"]
        wait_until(lambda: process.poll() is not None or healthy(f"http://127.0.0.1:{port}"), 30, "the daemon")
        assert process.poll() is None, logged.read_text()
        yield process
    finally:
        for pid in [process.pid, *in_session(process.pid)]:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(10)


def stored(tmp_path: Path) -> dict[str, list[tuple[str, str, str | None]]]:
    database = open_database(tmp_path / "findings.db")
    try:
        return outcomes(DeliveryMemory(database))
    finally:
        database.close()


# SIGINT (a terminal's Ctrl-C) and SIGTERM (systemd's default KillMode=control-group, dumb-init,
# tini -g, `kill -- -PGID`) to the whole process group are ignored by the child: the daemon stops
# it, and the batch it was diagnosing stays queued, as one cut off on the loop does, instead of
# being failed (an attempt spent) with a new pool started while the daemon shuts down.


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_to_the_daemons_group_leaves_the_batch_in_flight_queued(tmp_path: Path, signum: int) -> None:
    with StandIn(hang=True) as prometheus:
        port = free_port()
        config = daemon_config(tmp_path, prometheus.url, port)
        with daemon_process([sys.executable, "-m", "diagnosd"], config, tmp_path) as daemon:
            answer = httpx.post(f"http://127.0.0.1:{port}{WEBHOOK}", json=FIRING, timeout=10)
            wait_until(lambda: prometheus.seen, 20, "the batch's first query")
            asking = spawned(daemon.pid)  # the one process that asks Prometheus: the daemon runs no round
            os.killpg(daemon.pid, signum)
            code = daemon.wait(30)
            wait_until(lambda: not in_session(daemon.pid), 10, "the daemon's children gone with it")
        found = stored(tmp_path)
    log = (tmp_path / "daemon.log").read_text()
    assert answer.status_code == 202
    assert len(asking) == 1
    assert code in (0, -signum), log
    assert "diagnosd ready" in log or "serving on" in log
    # Cut off by the stop: queued, resumed at once at the next start (docs/daemon.md).
    assert found == {"queued": [(FINGERPRINT, "firing", None)]}, found


# A daemon killed outright (the OOM killer, SIGKILL) takes its diagnosis process with it: the
# process waits on the executor's queue forever otherwise, holding its memory (and the resource
# tracker, whose pipe it holds open).


def test_a_killed_daemon_leaves_no_diagnosis_process_behind(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: the batch fails at once, its process stays
    port = free_port()
    config = daemon_config(tmp_path, url, port)
    script = Path(sys.executable).parent / "diagnosd"  # the console script, as the image runs it
    with daemon_process([str(script)], config, tmp_path) as daemon:
        httpx.post(f"http://127.0.0.1:{port}{WEBHOOK}", json=FIRING, timeout=10)

        def diagnosed() -> float:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            return counter(text, "diagnosd_diagnoses_total", trigger="alert")

        wait_until(diagnosed, 20, "the alert diagnosed (and failed) in the process")
        children = spawned(daemon.pid)
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(10)
        deadline = time.monotonic() + 3
        while in_session(daemon.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [pid for pid in children if alive(pid)]
    assert len(children) == 1
    assert left == [], f"diagnosis process {left} outlived the daemon"
