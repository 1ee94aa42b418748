"""Benchmark: an alert storm on the webhook, diagnosed per alert and coalesced, side by side in one run.

Run: python bench/bench_storm.py [--pods 1000] [--alerts 1000] [--deliveries 10000] [--repeats 3]
(needs prometheus and promtool on PATH)

A real Prometheus holds a simulated fleet (bench_triage.fleet); the daemon (uvicorn on a loopback
port, the shipped trees, a fresh store each run) takes the storm from a load generator in a separate
process: `--deliveries` Alertmanager v4 deliveries, one alert each, where every tenth brings one of
`--alerts` distinct firing alerts (spread over every symptom) and the rest re-send one already sent
(HA twins, repeat_interval). The daemon logs as `diagnosd serve` does, its access log a line per
delivery, into a file. Printed for a bare ASGI app (the floor), the webhook route alone (no worker)
with its log lines written behind and written inline on the event loop's thread, and
`coalesce_window` 0s (each alert diagnosed on its own) and the default, the default with the batches
diagnosed on the daemon's event loop (`webhook.processes: 0`) instead of in a process of their own,
the default with scheduler rounds running on the daemon's loop all through the storm, and the
default and the on-loop modes once more with Prometheus' threads at nice 19 (its CPU no longer taken
from the daemon's: as if it answered from a machine of its own, as in production), medians over the
repeats: deliveries/s, ack p50 / p99, deliveries refused (503), evaluations run, the time from the
last delivery until every accepted alert is diagnosed, the CPU of the daemon, of its diagnosis
processes and of Prometheus, and the diagnosis processes' peak memory. Then the cost of recording a
delivery's new states: one transaction per delivery against one per alert; and of recording a
coalesced batch's alerts once its evaluation is done (each alert's resolution looked up, its part of
the diagnosis written with its finding link, its state marked done under its claim): one transaction
per alert against one for the batch. `--records-only` runs these two tables alone (no Prometheus
needed); `--postgres URL` adds the batch table on that PostgreSQL (an empty database or schema of
its own). `--stalls` samples, while each diagnosing mode runs, where the daemon's event loop stalled
over 20 ms (bench/stalls.py) and prints the calls that held it, most samples first.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import uvicorn
from bench_triage import AT, fleet  # bench/: run as `python bench/NAME.py`
from prometheus_client import CollectorRegistry
from stalls import Stalls

from diagnosd.api import create_app
from diagnosd.daemon import compose
from diagnosd.daemon.alertmanager.memory import BatchClaim, DeliveryMemory, Key, Lease
from diagnosd.daemon.compose import Services
from diagnosd.daemon.settings.model import Settings
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import CheckResult, Diagnosis, Evidence, NodeKind, RootCause, TargetDiagnosis, Verdict
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Recording, Tracker
from diagnosd.logs import FORMAT, NOISY, Aggregator, writing_behind
from diagnosd.promlocal import LocalPrometheus, backfill, free_port
from diagnosd.promlocal.openmetrics import write
from diagnosd.storage import open_database
from diagnosd.trees.model import Severity, Text

STARTS = "2026-02-01T11:55:00Z"


@dataclass(frozen=True)
class Mode:
    window: str | None = None  # coalesce_window; None: the default
    diagnose: bool = True  # False: the workers stopped, the webhook route alone
    floor: bool = False  # a bare ASGI app on the same server instead of diagnosd
    # The log lines written on the event loop's thread, as `diagnosd serve` wrote them before they
    # were written behind (diagnosd/logs.py writing_behind).
    logs_inline: bool = False
    # Prometheus' threads at this nice value while the mode runs: 19 leaves it the CPU the daemon
    # and the load generator do not want, as if it answered from a machine of its own.
    prometheus_nice: int = 0
    # webhook.processes; None: the default (batches diagnosed in a process of their own).
    processes: int | None = None
    # Scheduler rounds (every tree over every pod, on the daemon's event loop) run one after
    # another for as long as the storm lasts, as a round due during an incident would.
    rounds: bool = False


MODES = {
    "floor": Mode(floor=True),
    "route only": Mode(diagnose=False),
    "route, logs inline": Mode(diagnose=False, logs_inline=True),
    "per alert": Mode(window="0s"),
    "coalesced": Mode(),
    "coalesced, on loop": Mode(processes=0),
    "coalesced, prom nice": Mode(prometheus_nice=19),
    "on loop, prom nice": Mode(processes=0, prometheus_nice=19),
    "coalesced, rounds": Mode(rounds=True),
}


@contextlib.contextmanager
def reniced(pid: int | None, nice: int) -> Iterator[None]:
    """Every thread of `pid` at `nice` (Linux nices threads, not processes), then back at 0."""

    def renice(value: int) -> None:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, int(task.name), value)

    if pid is None or nice == 0:
        yield
        return
    renice(nice)
    try:
        yield
    finally:
        renice(0)


@contextlib.contextmanager
def logged(mode: Mode, lines: TextIO) -> Iterator[None]:
    """The daemon's logging for one run: written behind, as `diagnosd serve` logs, or inline."""
    if not mode.logs_inline:
        with writing_behind("INFO", lines):
            yield
        return
    target = logging.StreamHandler(lines)
    target.setFormatter(logging.Formatter(FORMAT))
    root = logging.getLogger()
    kept = root.level, root.handlers[:], {name: logging.getLogger(name).level for name in NOISY}
    root.handlers[:] = [Aggregator(target)]
    root.setLevel(logging.INFO)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers[:] = kept[1]
        root.setLevel(kept[0])
        for name, level in kept[2].items():
            logging.getLogger(name).setLevel(level)


def payload(symptom: str, pod: int) -> dict[str, Any]:
    """One Alertmanager (0.25, webhook v4) delivery carrying one firing alert of `symptom` on `pod`."""
    labels = {
        "alertname": f"DiagnosdBench_{symptom}",
        "symptom": symptom,
        "severity": "warning",
        "namespace": "prod",
        "pod": f"vllm-{pod}",
        "model_name": "llama",
        "job": "vllm",
        "instance": f"10.0.{pod // 250}.{pod % 250}:8000",
    }
    annotations = {"summary": f"{symptom} on vllm-{pod}", "description": f"vllm-{pod} shows {symptom}"}
    group = {"alertname": labels["alertname"]}
    return {
        "receiver": "diagnosd",
        "status": "firing",
        "alerts": [
            {
                "status": "firing",
                "labels": labels,
                "annotations": annotations,
                "startsAt": STARTS,
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": f"http://127.0.0.1:9090/graph?g0.expr=diagnosd_bench_{symptom}&g0.tab=1",
                "fingerprint": hashlib.sha256(f"{symptom}/{pod}".encode()).hexdigest()[:16],
            }
        ],
        "groupLabels": group,
        "commonLabels": labels,
        "commonAnnotations": annotations,
        "externalURL": "http://127.0.0.1:9093",
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{labels["alertname"]}"}}',
        "truncatedAlerts": 0,
    }


def bodies(symptoms: list[str], alerts: int, deliveries: int, seed: int) -> list[bytes]:
    """The storm's onset brings the new alerts (every other delivery of the first 2 x `alerts`), the
    rest re-send a random one already sent, as HA twins and repeat_interval do."""
    rng = random.Random(seed)
    distinct = [(symptoms[i % len(symptoms)], i) for i in range(alerts)]
    out: list[bytes] = []
    sent = 0
    for n in range(deliveries):
        if n % 2 == 0 and sent < alerts:
            pick, sent = sent, sent + 1
        else:
            pick = rng.randrange(sent)
        out.append(json.dumps(payload(*distinct[pick])).encode())
    return out


async def generate(port: int, payloads: list[bytes], concurrency: int) -> dict[str, Any]:
    """Post every body, `concurrency` at a time, each on a kept-alive connection; time each ack.

    Plain HTTP/1.1 over asyncio streams: a full HTTP client costs more per request than the daemon
    does (httpx alone managed about 120 requests/s on this loopback), and would measure itself.
    """
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    next_body = iter(payloads)

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for body in next_body:
                head = (
                    f"POST /webhook/alertmanager HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                )
                start = time.perf_counter()
                writer.write(head.encode() + body)
                status, length = _head(await reader.readuntil(b"\r\n\r\n"))
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - start)
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(concurrency)))
    seconds = time.perf_counter() - start
    latencies.sort()
    return {
        "deliveries": len(latencies),
        "seconds": seconds,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(int(len(latencies) * 0.99), len(latencies) - 1)],
        "statuses": statuses,
    }


def _head(raw: bytes) -> tuple[int, int]:
    """The status and Content-Length of a response head (the daemon always sends a length)."""
    lines = raw.decode("latin-1").split("\r\n")
    fields = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
    length = {name.strip().lower(): value.strip() for name, value in fields.items()}["content-length"]
    return int(lines[0].split()[1]), int(length)


async def floor(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The same server with nothing behind it: what uvicorn and the loopback cost on this machine."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    body = b'{"queued":0,"duplicates":1,"skipped":[],"truncated_alerts":0}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 202, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True)
class Run:
    rate: float
    p50_ms: float
    p99_ms: float
    refused: int
    evaluations: int
    alerts_done: int
    drain_s: float
    # CPU seconds from the first delivery until the backlog drained: the daemon's process (every
    # thread: the event loop, the log writer), its diagnosis processes' (their start included:
    # they start with the first batch) and Prometheus'.
    daemon_cpu_s: float
    offloaded_cpu_s: float
    prometheus_cpu_s: float
    # The peak resident memory (VmHWM) of the largest diagnosis process.
    offloaded_mib: float
    # Scheduler rounds completed while the storm came in (mode.rounds).
    rounds: int = 0


def cpu_seconds(pid: int | None) -> float:
    """A process's CPU time so far (user and system, every thread), from /proc; NaN without one."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks: int = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


async def rounds_until_cancelled(services: Services) -> int:
    """Scheduler rounds one after another until cancelled; how many completed."""
    completed = 0
    try:
        while True:
            await services.scheduler.run_round()
            completed += 1
    except asyncio.CancelledError:
        return completed


def peak_mib(pid: int) -> float:
    """A process's peak resident memory so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children() -> list[int]:
    """This process's live child processes (Prometheus among them; the load generator has been reaped)."""
    found: list[int] = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            found += [int(pid) for pid in (task / "children").read_text().split()]
    return found


def counted(metric: Any, **labels: str) -> float:
    return float(
        sum(
            s.value
            for family in metric.collect()
            for s in family.samples
            if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items())
        )
    )


async def run_once(
    prometheus: str, prometheus_pid: int | None, work: Path, mode: Mode, args: argparse.Namespace
) -> Run:
    hook: dict[str, Any] = {} if mode.window is None else {"coalesce_window": mode.window}
    if mode.processes is not None:
        hook["processes"] = mode.processes
    settings = Settings.model_validate(
        {
            "prometheus": {"url": prometheus, "timeout": "60s"},
            "store": {"path": str(work / "findings.db")},
            "scheduler": {"enabled": False},
            "webhook": hook,
        }
    )
    origin = time.time()
    # Time runs from the fleet's AT, so that windows pass as they would in an incident.
    built = compose.build(
        settings, registry=CollectorRegistry(), clock=lambda: AT + timedelta(seconds=time.time() - origin)
    )
    app: Any = floor if mode.floor else create_app(built)
    port = free_port()
    # As `diagnosd serve` runs it (diagnosd/cli/serve.py), access log included.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=True, server_header=False)
    if mode.floor:
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers a flag, not an event
        await asyncio.sleep(0.05)
    evaluations, done, drain, rounds_run = 0, 0, 0.0, 0
    stalls = Stalls() if args.stalls and mode.diagnose and not mode.floor else None
    if stalls is not None:
        stalls.start()
    try:
        services: Services | None = None if mode.floor else app.state.services
        if services is not None and not mode.diagnose:
            await services.inbox.stop()  # the route alone: nothing diagnoses meanwhile
        cpu = time.process_time(), cpu_seconds(prometheus_pid)
        rounds = asyncio.create_task(rounds_until_cancelled(services)) if services and mode.rounds else None
        generator = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "--generate",
            str(port),
            str(work.parent / "bodies.json"),
            str(args.concurrency),
            stdout=subprocess.PIPE,
        )
        out, _ = await generator.communicate()
        load = json.loads(out)
        if rounds is not None:
            rounds.cancel()
            rounds_run = await rounds
        if services is not None and mode.diagnose:
            start = time.perf_counter()
            await services.inbox.join()
            drain = time.perf_counter() - start
            evaluations = int(counted(services.metrics.diagnoses, trigger="alert"))
            done = len(services.memory.alerts_by_outcome("done"))
        daemon_cpu, prometheus_cpu = time.process_time() - cpu[0], cpu_seconds(prometheus_pid) - cpu[1]
        offloaded = [pid for pid in children() if pid != prometheus_pid]
        offloaded_cpu = sum(cpu_seconds(pid) for pid in offloaded)
        offloaded_mib = max((peak_mib(pid) for pid in offloaded), default=0.0)
    finally:
        if stalls is not None:
            stalls.stop()
            window = mode.window or "the default window"
            niced = f", Prometheus at nice {mode.prometheus_nice}" if mode.prometheus_nice else ""
            print(
                f"where the loop stalled over {stalls.over * 1000:.0f} ms, coalescing {window}{niced} "
                f"(one sample per {stalls.every * 1000:.0f} ms of a stall):",
                file=sys.stderr,
            )
            for where, count in stalls.top(8):
                print(f"  {count:5d}  {where}", file=sys.stderr)
        server.should_exit = True
        await serving
    return Run(
        rate=load["deliveries"] / load["seconds"],
        p50_ms=load["p50"] * 1000,
        p99_ms=load["p99"] * 1000,
        refused=int(load["statuses"].get("503", 0)),
        evaluations=evaluations,
        alerts_done=done,
        drain_s=drain,
        daemon_cpu_s=daemon_cpu,
        offloaded_cpu_s=offloaded_cpu,
        prometheus_cpu_s=prometheus_cpu,
        offloaded_mib=offloaded_mib,
        rounds=rounds_run,
    )


def transactions(work: Path, states: int, repeats: int) -> tuple[float, float]:
    """Median seconds to record `states` new alert states: one transaction per state, then one for all."""
    request = json.loads(json.dumps(payload("queue_backlog", 0)["alerts"][0]))
    now = datetime.now(UTC)
    per_state: list[float] = []
    per_delivery: list[float] = []
    for r in range(repeats):
        database = open_database(work / f"tx-{r}.db")
        memory = DeliveryMemory(database)
        keys = [(f"{r}-{n}", "firing", STARTS) for n in range(2 * states)]
        start = time.perf_counter()
        for key in keys[:states]:
            memory.remember(key, request, "queued", now)
        per_state.append(time.perf_counter() - start)
        start = time.perf_counter()
        memory.remember_all(((key, request) for key in keys[states:]), "queued", now)
        per_delivery.append(time.perf_counter() - start)
        database.close()
    return statistics.median(per_state), statistics.median(per_delivery)


def part_of(pod: int, at: datetime) -> Diagnosis:
    """One alert's part of a coalesced evaluation: its pod, where kv_pool_full holds."""
    text = Text(en="kv pool full", zh="kv pool full")
    proof = Evidence(check="kv_pool_full", query="max(kv)", operator="above", threshold=0.9, value=0.95)
    found = CheckResult(
        id="kv_pool_full",
        kind=NodeKind.CHECK,
        title=text,
        depth=1,
        verdict=Verdict.MATCHED,
        evidence=proof,
        cause="kv_pool_full",
    )
    detect = CheckResult(id="detect", kind=NodeKind.DETECT, title=text, depth=0, verdict=Verdict.MATCHED)
    cause = RootCause("kv_pool_full", text, Severity.WARNING, (text,), "kv_pool_full", 1, 1.05, (proof,))
    target = TargetDiagnosis({"namespace": "prod", "pod": f"vllm-{pod}"}, True, detect, (cause,), (found,))
    return Diagnosis("queue_backlog", text, at, {"namespace": "prod"}, ("namespace", "pod"), (target,), 3)


def batch_records(location: Path | str, alerts: int, repeats: int) -> tuple[float, float]:
    """Median seconds to record a coalesced batch of `alerts` alerts after its evaluation, the way
    the inbox did it alert by alert (two lookups, one transaction each) and the way it does now
    (one lookup a chunk, one transaction for the batch). Each from an empty store, alternated."""
    times: dict[str, list[float]] = {"each": [], "batch": []}
    ways = {"each": record_each, "batch": record_batch}
    database = open_database(location)
    memory, store = DeliveryMemory(database), Store(database)
    for _ in range(repeats):
        for way, record in ways.items():
            with database.transaction():
                for table in ("alerts", "findings", "targets"):
                    database.execute(f"DELETE FROM {table}")
            tracker, now = Tracker(store), datetime.now(UTC)
            keys: list[Key] = [(f"fp-{n}", "firing", STARTS) for n in range(alerts)]
            memory.claim_new([(key, {}) for key in keys], Lease("bench", now, now + timedelta(minutes=5)))
            parts = [(key, part_of(n, now)) for n, key in enumerate(keys)]
            start = time.perf_counter()
            record(memory, tracker, parts, now)
            times[way].append(time.perf_counter() - start)
            # Both ways did the whole work: every state done, every alert its finding.
            if memory.alerts_by_outcome("queued") or len(tracker.active()) != alerts:
                raise SystemExit(f"recording {alerts} alerts {way}: not every alert recorded")
    database.close()
    return statistics.median(times["each"]), statistics.median(times["batch"])


def resolution(key: Key) -> Key:
    return key[0], "resolved", key[2]


def record_each(memory: DeliveryMemory, tracker: Tracker, parts: list[tuple[Key, Diagnosis]], now: datetime) -> None:
    """As the inbox did before its batch methods: per alert, a lookup before the evaluation and one
    after it, then its findings and its mark in a transaction of their own."""
    live = [(key, mine) for key, mine in parts if memory.alert(resolution(key)) is None]
    for key, mine in live:
        if memory.alert(resolution(key)) is not None:
            continue
        claim = partial(memory.mark_within, key, "done", now, None, "bench")
        tracker.record(mine, trigger=Trigger.ALERT, now=now, for_=timedelta(0), alert=key[0], claim=claim)


def record_batch(memory: DeliveryMemory, tracker: Tracker, parts: list[tuple[Key, Diagnosis]], now: datetime) -> None:
    """As the inbox does now: one lookup for the batch before the evaluation and one after it,
    then every alert's findings and every mark in one transaction."""
    for _ in range(2):
        resolved = memory.alerts(resolution(key) for key, _ in parts)
        parts = [(key, mine) for key, mine in parts if resolution(key) not in resolved]
    claims = BatchClaim(memory, [key for key, _ in parts], "done", now, "bench")
    recordings = [Recording(mine, key[0], claim=claims.of(key)) for key, mine in parts]
    tracker.record_many(recordings, trigger=Trigger.ALERT, now=now, for_=timedelta(0))


def print_batch_records(location: Path | str, name: str, repeats: int, sizes: Sequence[int] = (1, 50, 300)) -> None:
    for alerts in sizes:
        one_each, one_for_all = batch_records(location, alerts, repeats)
        print(
            f"{name}: recording a coalesced batch of {alerts:>3} alerts: one transaction each "
            f"{one_each * 1000:8.2f} ms, one for the batch {one_for_all * 1000:7.2f} ms (x{one_each / one_for_all:.1f})"
        )


def main(args: argparse.Namespace) -> None:
    if args.records_only:
        with tempfile.TemporaryDirectory() as tmp:
            record_tables(Path(tmp), args)
        return
    rules = compose.load()
    symptoms = sorted(rules.ruleset.trees)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with (work / "fleet.om").open("w") as out:
            write(out, fleet(args.pods))
        backfill(work / "fleet.om", work / "tsdb")
        payloads = bodies(symptoms, args.alerts, args.deliveries, args.seed)
        (work / "bodies.json").write_text(json.dumps([b.decode() for b in payloads]))
        modes = {name: MODES[name] for name in MODES if not args.modes or name in args.modes}
        runs: dict[str, list[Run]] = {mode: [] for mode in modes}
        with LocalPrometheus(work / "prometheus", tsdb=work / "tsdb") as prom:
            for repeat in range(args.repeats):
                for name, mode in modes.items():  # alternated, so that every mode meets the same noise
                    run_dir = work / f"run-{repeat}-{name.replace(' ', '-')}"
                    run_dir.mkdir()
                    # Logged as `diagnosd serve` logs (its access log a line per delivery), into a
                    # file as a container runtime's log would take it.
                    with (
                        (run_dir / "daemon.log").open("w") as lines,
                        logged(mode, lines),
                        reniced(prom.pid, mode.prometheus_nice),
                    ):
                        runs[name].append(asyncio.run(run_once(prom.url, prom.pid, run_dir, mode, args)))
        print(
            f"{args.deliveries} deliveries ({args.alerts} distinct alerts over {len(symptoms)} symptoms, the rest "
            f"re-sends), {args.pods} pods, {args.concurrency} connections; medians of {args.repeats} runs"
        )
        columns = (
            *("mode", "deliv/s", "ack p50 ms", "ack p99 ms", "refused", "evaluations", "alerts done", "drain s"),
            *("daemon cpu s", "offload cpu s", "prom cpu s", "offload MiB", "rounds"),
        )
        widths = (20, 8, 11, 11, 8, 12, 12, 8, 13, 14, 11, 12, 7)
        print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
        medians: dict[str, dict[str, float]] = {}
        for name, done in runs.items():
            m = {field: statistics.median(getattr(r, field) for r in done) for field in Run.__dataclass_fields__}
            medians[name] = m
            cells = (
                name,
                f"{m['rate']:.0f}",
                f"{m['p50_ms']:.1f}",
                f"{m['p99_ms']:.1f}",
                f"{m['refused']:.0f}",
                f"{m['evaluations']:.0f}",
                f"{m['alerts_done']:.0f}",
                f"{m['drain_s']:.1f}",
                f"{m['daemon_cpu_s']:.1f}",
                f"{m['offloaded_cpu_s']:.1f}",
                f"{m['prometheus_cpu_s']:.1f}",
                f"{m['offloaded_mib']:.0f}",
                f"{m['rounds']:.0f}",
            )
            print(" ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True)))
        if "per alert" in medians and "coalesced" in medians:
            per, co = medians["per alert"], medians["coalesced"]
            print(
                f"coalesced / per alert: deliveries/s x{co['rate'] / per['rate']:.2f}, "
                f"evaluations x{co['evaluations'] / max(per['evaluations'], 1):.3f}"
            )
        if not args.modes:
            record_tables(work, args)


def record_tables(work: Path, args: argparse.Namespace) -> None:
    """What recording costs in the store, one transaction per alert against one for many."""
    for states in (1, 50, 300):
        one_each, one_for_all = transactions(work, states, args.repeats)
        print(
            f"recording {states:>3} new states: one transaction each {one_each * 1000:7.2f} ms, "
            f"one for the delivery {one_for_all * 1000:6.2f} ms (x{one_each / one_for_all:.1f})"
        )
    print_batch_records(work / "batch.db", "SQLite", args.repeats)
    if args.postgres:
        print_batch_records(args.postgres, "PostgreSQL", args.repeats)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--alerts", type=int, default=1000)
    parser.add_argument("--deliveries", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--records-only", action="store_true", help="only the store's recording tables")
    parser.add_argument("--postgres", metavar="URL", help="also record batches on this PostgreSQL")
    parser.add_argument("--stalls", action="store_true", help="sample where the event loop stalls while diagnosing")
    parser.add_argument(
        "--modes", nargs="+", choices=sorted(MODES), metavar="MODE", help="only these modes (default: every one)"
    )
    return parser.parse_args()


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--generate":
        # The load generator's process: bodies prepared by the parent, results as JSON on stdout.
        port, path, concurrency = int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
        sent = [body.encode() for body in json.loads(path.read_text())]
        print(json.dumps(asyncio.run(generate(port, sent, concurrency))))
    else:
        main(parse())
