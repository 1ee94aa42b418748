"""Review of the fixes to alert batches diagnosed in a process of their own (offload.py): the
daemon's circuit admitting each batch and hearing what its calls met (`Tally.settle`), the start
that falls back to the event loop, and the stop.

The rule the circuit tests hold the offloaded daemon to: its circuit ends where the same calls
would leave it on the event loop (`OnLoop`: the daemon's LookupCache over its CircuitSource, each
call settled under its own ticket), since `/readyz`, the circuit's metrics and the next batches
read it. Where both can run, a test runs both (`processes` 0 is the control). The end-to-end ones
use a real Prometheus (stopped mid-test: an outage) or the loopback stand-in; the in-process ones
run the same batch twice on a source that misbehaves on demand: by the loop's Diagnoser behind
the loop's daemon circuit, and by the child's (compose._daemon_diagnoser behind its Heard
circuit, reporting to a Tally), whose tally is replayed onto a second circuit exactly as
Offloaded.parts does.

Each test says above it which defect it guards against (all fixed since this review).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import time
from collections.abc import AsyncIterator, Collection, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from diagnosd.daemon import compose
from diagnosd.daemon.alertmanager import offload
from diagnosd.daemon.alertmanager.offload import Heard, Offloaded, Tally
from diagnosd.daemon.alertmanager.parts import OnLoop, Parting
from diagnosd.daemon.compose import Services
from diagnosd.daemon.settings.model import Settings
from diagnosd.engine import Scope
from diagnosd.errors import (
    CircuitOpen,
    DeadlineExceeded,
    DiagnosisProcessLost,
    QueryRejected,
    SourceError,
    SourceUnavailable,
)
from diagnosd.findings.lifecycle import Trigger
from diagnosd.sinks.metrics import Metrics
from diagnosd.sources.base import Sample
from diagnosd.sources.circuit import Circuit, CircuitSource, Policy, State, Status
from diagnosd.trees import RuleSet
from tests.conftest import StartPrometheus
from tests.fakes.standin import StandIn
from tests.serving import AT, build, fleet, serve, settings, wait_until

PODS = ("vllm-0", "vllm-1", "vllm-2")
SCOPES = [{"namespace": "prod", "pod": pod} for pod in PODS]
BATCH = Scope.among({"namespace": ["prod"], "pod": list(PODS)})
URL = "http://127.0.0.1:9"


def parting_of(services: Services) -> Parting:
    parting: Parting = services.inbox._parting
    return parting


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


# 1. The circuit, end to end: a real Prometheus that answers the first batch (the lookups are
# kept, prometheus.lookup_ttl 30s), then goes down (stopped).
#
# A defect this guards against, since fixed (offload.py Tally.settle, with diagnoser.py's
# MeteredSource above compose's LookupCache): the child's Diagnoser meters each call above its
# LookupCache, so a lookup answered from that cache is in the tally as a success although it never
# reached Prometheus, and Tally.settle settles it on the daemon's circuit as one. Half-open, the
# batch's ticket is the probe: the first entry of the tally (the cached metric-name lookup) decides
# it and closes the circuit, and every failed query after it is stale (another generation) and
# ignored. On the loop the cached lookup never reaches the circuit: the first query is the probe, it
# fails, the circuit opens again with its cool-down doubled. With processes: 1 the daemon's circuit
# ends closed, 0 failures, Prometheus down: /readyz reads ready and every next batch is admitted
# (only the child's own circuit, open too, then fails them fast).


@pytest.mark.parametrize("processes", [0, 1])
async def test_a_probe_batch_that_reaches_a_down_prometheus_leaves_the_circuit_open(
    tmp_path: Path, start_prometheus: StartPrometheus, processes: int
) -> None:
    prom = start_prometheus(fleet())
    config = settings(
        prom.url,
        tmp_path,
        webhook={"processes": processes},
        prometheus={"circuit": {"failures": 1, "cooldown": "1s"}},
    )
    async with serve(build(config, rand=lambda: 0.0)) as (_, services):
        parting = parting_of(services)
        circuit = services.source.circuit
        await parting.parts("queue_backlog", BATCH, AT, SCOPES)  # answered: its lookups are kept
        prom.stop()
        with pytest.raises(SourceUnavailable):
            await parting.parts("queue_backlog", BATCH, AT, SCOPES)
        opened = circuit.status()
        await asyncio.sleep(1.3)  # the cool-down (1s, and the child's no longer) is over
        with pytest.raises(SourceError):
            await parting.parts("queue_backlog", BATCH, AT, SCOPES)  # the probe: Prometheus still down
        probed = circuit.status()
    assert (opened.state, opened.openings) == (State.OPEN, 1)
    assert (probed.state, probed.openings) == (State.OPEN, 2), (
        f"the probe batch found Prometheus down, and the daemon's circuit is {probed}"
    )


# A defect this guards against, since fixed (same cause, offload.py Tally.settle): outside a probe,
# the cached lookup at the head of every batch's tally is settled as a success and resets the
# daemon's count of consecutive failures; failures that accumulate over batches on the loop (3
# queries a batch, `failures: 4`: open at the second failing batch) never do with processes: 1.
# Meanwhile the child's own circuit, which its cache sits above as the loop's does, does open, and
# refuses every later batch the daemon's closed circuit admits (CircuitOpen from the child, heard by
# no one): the daemon's circuit says closed, 0 failures, while every alert batch fails fast.


@pytest.mark.parametrize("processes", [0, 1])
async def test_failures_over_several_batches_open_the_daemons_circuit(
    tmp_path: Path, start_prometheus: StartPrometheus, processes: int
) -> None:
    prom = start_prometheus(fleet())
    config = settings(prom.url, tmp_path, webhook={"processes": processes}, prometheus={"circuit": {"failures": 4}})
    async with serve(build(config, rand=lambda: 0.0)) as (_, services):
        parting = parting_of(services)
        circuit = services.source.circuit
        await parting.parts("queue_backlog", BATCH, AT, SCOPES)
        prom.stop()
        seen: list[Status] = []
        errors: list[SourceError] = []
        for _ in range(3):
            with pytest.raises(SourceError) as failed:
                await parting.parts("queue_backlog", BATCH, AT, SCOPES)
            errors.append(failed.value)
            seen.append(circuit.status())
    assert seen[0].failures == 3  # the first failing batch: its 3 queries, both ways
    assert [s.state for s in seen[1:]] == [State.OPEN, State.OPEN], (
        f"2 batches of 3 failed queries each, failures: 4; the daemon's circuit went {seen}"
    )
    assert isinstance(errors[-1], CircuitOpen)


# 2. The circuit in-process: the child's Diagnoser (what compose.batch_diagnoser builds) over a
# source that misbehaves on demand; its CircuitSource's circuit is where the daemon's circuit
# ends on the loop (the same LookupCache over the same CircuitSource), and a second circuit gets
# the tally as Offloaded.parts settles it (admit(None) before, Tally.settle after, the tally
# pickled as it crosses back).


class Misbehaving:
    """A QuerySource: every name exists except counters (asked of the metadata then), and each
    endpoint answers, raises the given error, or (queries) hangs."""

    def __init__(
        self,
        *,
        query: SourceError | None = None,
        metadata: SourceError | None = None,
        hang: bool = False,
        counters: bool = True,
    ) -> None:
        self.query_error = query
        self.metadata_error = metadata
        self.hang = hang
        self.counters = counters
        self.asked: list[str] = []

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        self.asked.append("query")
        if self.hang:
            await asyncio.Event().wait()
        if self.query_error is not None:
            raise self.query_error
        return []

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        self.asked.append("metric_names")
        return {c for c in candidates if self.counters or not c.endswith("_total")}

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        self.asked.append("metadata")
        if self.metadata_error is not None:
            raise self.metadata_error
        return {}


class Both:
    """The loop's daemon circuit (`loop`, under the diagnoser's CircuitSource) and the offloaded
    daemon's (`offloaded`, hearing the tallies), on one fake clock."""

    def __init__(self, source: Misbehaving, policy: Policy, deadline: str = "20s") -> None:
        self.now = [0.0]
        self.loop = Circuit(policy, URL, clock=lambda: self.now[0], rand=lambda: 0.0)
        self.offloaded = Circuit(policy, URL, clock=lambda: self.now[0], rand=lambda: 0.0)
        self.config = settings(URL, Path("/nonexistent"), rules_dir=None, prometheus={"diagnosis_deadline": deadline})
        self.ruleset = shipped()
        self.source = source
        self.tally = Tally()
        self.crossed = Tally()  # the last batch's, as it came back
        # The loop's Diagnoser, behind the loop's circuit; the child's, behind its Heard circuit.
        self.diagnoser = compose._daemon_diagnoser(
            self.config, self.ruleset, CircuitSource(source, self.loop), Tally(), lambda: AT, time.monotonic
        )
        self.child = compose._daemon_diagnoser(
            self.config,
            self.ruleset,
            CircuitSource(source, Heard(URL, self.tally)),
            self.tally,
            lambda: AT,
            time.monotonic,
        )
        self.loop_asked: list[str] = []

    async def batch(self, symptom: str = "queue_backlog") -> BaseException | None:
        """One batch, diagnosed on the loop and by the child's Diagnoser, whose tally is then
        settled as Offloaded.parts settles it; returns the child's error."""
        errors: list[BaseException | None] = []
        for diagnoser in (self.diagnoser, self.child):
            if diagnoser is self.child:
                self.loop_asked, self.source.asked = self.source.asked, []
                ticket = self.offloaded.admit(None)
            try:
                looked = await diagnoser.diagnose(diagnoser.tree(symptom), BATCH, AT, Trigger.ALERT)
                assert looked.diagnosis.symptom == symptom
                errors.append(None)
            except SourceError as failed:
                errors.append(failed)
        self.crossed = pickle.loads(pickle.dumps(self.tally.taken()))
        self.crossed.settle(self.offloaded, ticket)
        return errors[-1]

    def fail_both(self, times: int, error: SourceError) -> None:
        """Earlier calls that failed, on both circuits alike."""
        for circuit in (self.loop, self.offloaded):
            for _ in range(times):
                circuit.settle(circuit.admit(None), error)


_SHIPPED: list[RuleSet] = []


def shipped() -> RuleSet:
    if not _SHIPPED:
        _SHIPPED.append(compose.load().ruleset)
    return _SHIPPED[0]


def brief(status: Status) -> tuple[State, int, int]:
    return status.state, status.failures, status.openings


DOWN = SourceUnavailable("cannot reach Prometheus", url=URL, status=503)


# A defect this guards against, since fixed (offload.py Tally.settle; sources/metered.py
# MeteredSource.metadata reports every metadata call with error None, declared_types having
# swallowed its SourceError): a metadata call that failed is in the tally as a success. On the loop
# it reached the CircuitSource and counted as a failure; replayed, it resets the count of
# consecutive failures instead: the offloaded daemon's circuit ends a failure short here, and where
# the lookups are cached (a failed metadata answer is not kept: asked again by every batch) it is
# reset at every batch.


async def test_a_failed_metadata_call_counts_as_on_the_loop() -> None:
    source = Misbehaving(query=DOWN, metadata=DOWN, counters=False)
    both = Both(source, Policy(failures=1000))
    await both.batch()
    assert "metadata" in source.asked
    assert ("metadata", None) in [(endpoint, error) for endpoint, _, error in both.crossed.queries]
    assert brief(both.offloaded.status()) == brief(both.loop.status())


# A defect this guards against, since fixed (offload.py Tally.settle: DeadlineExceeded -> cut_off
# for every such entry): a call still queued behind the evaluator's concurrency (8) when the
# deadline passed is never sent (DeadlineSource raises before calling the source), and on the loop
# never reaches the circuit; only the 8 in flight are cut off (a timeout each). The tally holds a
# DeadlineExceeded for every query of the batch, and each is settled as a timeout: a hanging
# Prometheus counts 18 failures per batch of the shipped queue_backlog instead of 8 (with `failures:
# 10`, open vs closed).


async def test_calls_the_deadline_kept_from_being_sent_count_as_on_the_loop() -> None:
    source = Misbehaving(hang=True)
    both = Both(source, Policy(failures=10), deadline="1s")
    error = await both.batch()
    assert isinstance(error, SourceError)
    sent = source.asked.count("query")
    cut = [q for q in both.crossed.queries if isinstance(q[2], DeadlineExceeded)]
    assert sent == 8  # the evaluator's concurrency: the others never sent
    assert len(cut) > 10
    assert brief(both.offloaded.status()) == brief(both.loop.status())


# A defect this guards against, since fixed (offload.py Tally.settle: every call of the batch
# settled under its one ticket): the first call that changes the circuit bumps its generation, and
# every later entry of the tally is then stale and ignored. Half-open, the probe batch's first call
# (its metric-name lookup, answered) closes the circuit, and its queries' 503s with Retry-After: 30
# after it are dropped. On the loop each call takes its own ticket when it is sent: the lookup
# closes the circuit, the first query's Retry-After opens it again for 30 s. Offloaded, the daemon's
# circuit ends closed, 0 failures, while Prometheus asked for 30 s of quiet. (The same for any probe
# batch that meets an answer first and failures after it: a Prometheus whose series API answers and
# whose queries fail is closed on.)


async def test_a_probe_batch_whose_queries_meet_a_retry_after_leaves_the_circuit_open() -> None:
    source = Misbehaving(query=SourceUnavailable("HTTP 503", url=URL, status=503, retry_after=30.0))
    both = Both(source, Policy(failures=1, cooldown=1.0))
    both.fail_both(1, DOWN)  # open, both
    both.now[0] += 2.0  # the probe is due, both
    await both.batch()
    loop, offloaded = both.loop.status(), both.offloaded.status()
    assert brief(loop) == (State.OPEN, 1, 1)
    assert loop.probe_in == 30.0
    assert brief(offloaded) == brief(loop)
    assert offloaded.probe_in == loop.probe_in


# Controls, expected to pass: outside a probe, a 503 with Retry-After crosses the process
# boundary with its data (pickled) and opens the circuit for that long, as on the loop; a 4xx
# neither counts nor resets the failures; a probe batch answered with a 4xx closes the circuit
# both ways (an answer: Prometheus serves).


@pytest.mark.parametrize(
    ("answer", "before", "after"),
    [("retry_after", 0, (State.OPEN, 1, 1)), ("rejected", 0, (State.CLOSED, 0, 0)), ("rejected_probe", 1, None)],
)
async def test_a_retry_after_or_a_4xx_settles_as_on_the_loop(
    answer: str, before: int, after: tuple[State, int, int] | None
) -> None:
    error: SourceError = (
        SourceUnavailable("HTTP 503", url=URL, status=503, retry_after=30.0)
        if answer == "retry_after"
        else QueryRejected("HTTP 400 bad_data: parse error", url=URL, status=400)
    )
    both = Both(Misbehaving(query=error), Policy(failures=1, cooldown=1.0))
    if before:
        both.fail_both(before, DOWN)  # open, both
        both.now[0] += 2.0  # the probe is due, both
    await both.batch()
    loop, offloaded = both.loop.status(), both.offloaded.status()
    assert brief(offloaded) == brief(loop)
    assert brief(loop) == (after or (State.CLOSED, 0, 0))
    assert offloaded.probe_in == loop.probe_in == (30.0 if answer == "retry_after" else None)


# A tally that comes back after the circuit changed (another batch's, workers: 2) is stale, as a
# call sent before the change is on the loop: it must neither reopen a circuit a later probe
# closed nor count against it. Expected to pass.


def test_a_batch_admitted_before_the_circuit_changed_is_not_heard() -> None:
    now = [0.0]
    circuit = Circuit(Policy(failures=1, cooldown=1.0), URL, clock=lambda: now[0], rand=lambda: 0.0)
    slow = circuit.admit(None)  # a batch diagnosing for long
    fast = circuit.admit(None)  # another worker's batch
    failed = Tally(heard=[(DOWN, True, False)])
    failed.settle(circuit, fast)  # opens it
    now[0] = 2.0
    probe = circuit.admit(None)
    Tally(heard=[(None, True, False)]).settle(circuit, probe)  # answered: closed
    failed.settle(circuit, slow)
    assert brief(circuit.status()) == (State.CLOSED, 0, 0)


# A defect this guards against, since fixed (offload.py Offloaded.parts: the ticket is taken when
# the batch is queued to the pool, not when a process starts it): with the shipped webhook.workers:
# 2 and processes: 1, a second batch waits in the pool behind the first, holding a ticket taken
# while the circuit was closed. Here a REST diagnosis on the loop meets a 503 with Retry-After: 30
# meanwhile, and the daemon's circuit opens; the queued batch is then diagnosed anyway and its
# requests reach the Prometheus that asked for 30 s of quiet (the child's own circuit had heard
# nothing). On the loop, each of its calls would have been refused by the open circuit.


@pytest.mark.parametrize("processes", [0, 1])
async def test_a_batch_waiting_for_a_process_is_not_sent_once_the_circuit_opened(
    tmp_path: Path, processes: int
) -> None:
    with StandIn(hang=True) as prometheus:
        config = settings(
            prometheus.url,
            tmp_path,
            webhook={"processes": processes},
            prometheus={"diagnosis_deadline": "2s", "timeout": "10s"},
        )
        async with serve(build(config)) as (_, services):
            parting = parting_of(services)
            first = asyncio.create_task(parting.parts("queue_backlog", BATCH, AT, SCOPES))
            await asyncio.to_thread(wait_until, lambda: prometheus.seen, 15, "the first batch asking")
            second = asyncio.create_task(parting.parts("queue_backlog", BATCH, AT, SCOPES))
            await asyncio.sleep(0.1)  # admitted, and sent to the pool (on the loop: asking too)
            prometheus.hang = False  # now 503 with Retry-After: 30
            tree = services.diagnoser.tree("queue_backlog")
            with pytest.raises(SourceUnavailable):
                await services.diagnoser.diagnose(tree, Scope.of({"namespace": "prod"}), None, Trigger.API)
            opened = services.source.circuit.status()
            asked = prometheus.seen
            results = await asyncio.gather(first, second, return_exceptions=True)
    assert opened.state is State.OPEN
    assert opened.probe_in is not None
    assert opened.probe_in > 25
    assert all(isinstance(result, SourceError) for result in results), results
    assert prometheus.seen == asked, (
        f"{prometheus.seen - asked} request(s) sent after Prometheus asked for 30 s of quiet"
    )


# 3. Starting and stopping the processes.


@asynccontextmanager
async def offloaded(config: Settings, **options: Any) -> AsyncIterator[Offloaded]:
    parting = Offloaded(
        compose.batch_diagnoser,
        config,
        compose.build(config, registry=CollectorRegistry()).rules.ruleset,
        Metrics(CollectorRegistry()),
        lambda: AT,
        processes=1,
        **options,
    )
    try:
        yield parting
    finally:
        await parting.close()


# A defect this guards against, since fixed (offload.py Offloaded.parts, the `except
# BrokenProcessPool` branch: `self._renew` is outside `_submit`'s OSError guard): a process that
# dies mid-batch where no new pool can be made (no /dev/shm any more, the semaphores refused) raises
# the OSError itself out of parts(), neither DiagnosisProcessLost (retried as an outage, parts.py's
# contract) nor a fall back to the loop: the inbox takes it for a bug (`handling failed`, logged
# with its traceback).


async def test_a_process_dying_where_no_new_one_can_start_fails_its_batch_as_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[object] = []
    real = ProcessPoolExecutor

    def once(*args: Any, **kwargs: Any) -> Any:
        if made:  # as /dev/shm refuses the next pool's locks
            raise PermissionError(13, "Permission denied", "/dev/shm/sem.mp-2")
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(offload, "ProcessPoolExecutor", once)
    with StandIn(hang=True) as hanging:
        config = settings(hanging.url, tmp_path, prometheus={"timeout": "20s"})
        rules = compose.build(config, registry=CollectorRegistry()).rules.ruleset
        diagnoser = compose.batch_diagnoser(
            config, rules, Metrics(CollectorRegistry()), lambda: AT, Circuit(Policy(), hanging.url)
        )
        async with diagnoser as loop, offloaded(config, fallback=OnLoop(loop)) as parting:
            batch = asyncio.create_task(parting.parts("queue_backlog", BATCH, AT, SCOPES))
            await asyncio.to_thread(wait_until, lambda: hanging.seen, 15, "the batch asking")
            [pid] = parting.pids()
            os.kill(pid, signal.SIGKILL)
            [raised] = await asyncio.gather(batch, return_exceptions=True)
    assert isinstance(raised, DiagnosisProcessLost), f"{type(raised).__name__}: {raised}"


# A defect this guards against, since fixed (offload.py _stop with _start's SIGTERM ignored):
# `process.terminate()` is SIGTERM, which the child now ignores (signal.SIG_IGN in _start), and the
# join after it has no timeout: a child still diagnosing at STOP_WAIT is never terminated, and
# close() (the daemon's shutdown) waits for its diagnosis to end by itself, up to
# prometheus.diagnosis_deadline (20 s) or for ever. Fix: process.kill() (SIGKILL), or restore
# SIGTERM's default in the child once it is started.


async def test_close_ends_a_process_still_diagnosing_after_the_stop_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offload, "STOP_WAIT", 0.2)
    with StandIn(hang=True) as hanging:
        config = settings(hanging.url, tmp_path, prometheus={"timeout": "20s"})
        async with offloaded(config) as parting:
            batch = asyncio.create_task(parting.parts("queue_backlog", BATCH, AT, SCOPES))
            await asyncio.to_thread(wait_until, lambda: hanging.seen, 15, "the batch asking")
            [pid] = parting.pids()
            batch.cancel()  # as the inbox stops before the parting closes
            await asyncio.gather(batch, return_exceptions=True)
            started = time.monotonic()
            closing = asyncio.create_task(parting.close())
            done, _ = await asyncio.wait({closing}, timeout=2.0)
            waited = time.monotonic() - started
        # (the StandIn, leaving, releases the request: the child ends, close() returns)
    await closing
    assert gone(pid)
    assert done, f"close() still waiting after {waited:.1f}s, STOP_WAIT 0.2s: the child ignored terminate()"


# Lazy creation, expected to pass: no process, no pool, before the first batch; close() then has
# nothing to stop.


async def test_no_process_starts_before_the_first_batch(tmp_path: Path) -> None:
    parting = Offloaded(
        compose.batch_diagnoser,
        settings(URL, tmp_path),
        shipped(),
        Metrics(CollectorRegistry()),
        lambda: AT,
        processes=1,
    )
    assert parting.pids() == []
    assert parting._pool is None
    await parting.close()
    assert parting._pool is None
