"""The one composition root: builds rules, sources and the engine from settings (`build`, what
`serve --check` stops at) and opens the daemon's live parts from it (`open_services`), closed in
reverse order; the API's lifespan holds them for exactly as long as the app serves. The command
line's Diagnoser (`diagnoser`) is built here too. Nothing happens at import time."""

from __future__ import annotations

import gc
import logging
import os
import random
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path

from prometheus_client import CollectorRegistry

from diagnosd.daemon.alertmanager.inbox import LOCAL, Inbox
from diagnosd.daemon.alertmanager.memory import DeliveryMemory
from diagnosd.daemon.alertmanager.offload import Offloaded
from diagnosd.daemon.alertmanager.parts import OnLoop, Parting
from diagnosd.daemon.diagnoser import Diagnoser, Observer
from diagnosd.daemon.scheduler import Scheduler
from diagnosd.daemon.settings import Settings
from diagnosd.engine.params import effective
from diagnosd.errors import ParamError, Problem, SettingsError
from diagnosd.findings.lifecycle import Finding, State
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from diagnosd.moments import utc_now
from diagnosd.render.finding import finding_words
from diagnosd.sinks.alertmanager import AlertmanagerSink
from diagnosd.sinks.grafana import GrafanaSink
from diagnosd.sinks.metrics import FindingsCollector, Metrics
from diagnosd.sources import PrometheusConfig, PrometheusSource, QuerySource
from diagnosd.sources.circuit import Circuit, CircuitSource, Policy
from diagnosd.sources.deadline import Deadline
from diagnosd.sources.lookups import LookupCache
from diagnosd.storage import is_url, open_database
from diagnosd.topology import DEFAULT as DEFAULT_TOPOLOGY
from diagnosd.topology import Topology
from diagnosd.trees import RuleSet, load_rules
from diagnosd.trees.location import rules_dir_variable, shipped_rules_dir
from diagnosd.urls import redact

# Allocations between two collections of the youngest generation while the daemon is up.
YOUNG_THRESHOLD = 50_000

log = logging.getLogger(__name__)


def default_rules_dir() -> Path:
    """$DIAGNOSD_RULES_DIR, else the trees shipped with the package (diagnosd.trees.location)."""
    return rules_dir_variable(os.environ) or shipped_rules_dir()


@dataclass(frozen=True)
class Rules:
    ruleset: RuleSet
    directory: Path


def load(directory: Path | None = None) -> Rules:
    """Load and validate rules; raises RulesError with every problem."""
    where = directory or default_rules_dir()
    return Rules(load_rules(where), where)


@asynccontextmanager
async def diagnoser(
    config: PrometheusConfig,
    rules: Rules,
    *,
    params: Mapping[str, Mapping[str, float | str]] | None = None,
    strict_labels: Sequence[str] = (),
    topology: Topology = DEFAULT_TOPOLOGY,
    wrap: Callable[[QuerySource], QuerySource] | None = None,
    circuit: Policy | None = None,
) -> AsyncIterator[Diagnoser]:
    """The daemon's Diagnoser, unmetered, on a PrometheusSource whose client lives as long as the
    context: what the command line diagnoses with, so it refuses a blind answer as the daemon does.
    `wrap` puts a layer around the source (a benchmark's query counter).

    Behind a circuit of its own, as the daemon's: a command's diagnosis sends its queries in
    batches, and once `circuit.failures` of them (5 by default) found Prometheus unwell, the rest
    fail at once (their checks unknown) instead of each waiting out its timeout and retries."""
    async with config.client() as client:
        guard = Circuit(circuit or Policy(), redact(config.url))
        source: QuerySource = CircuitSource(PrometheusSource(config, client), guard)
        yield Diagnoser(
            wrap(source) if wrap else source,
            rules.ruleset,
            params=params,
            strict_labels=strict_labels,
            topology=topology,
        )


# The daemon's composition: settings + rules + the seams a test may replace (registry, clock, source).

SourceFactory = Callable[[], AbstractAsyncContextManager[QuerySource]]


@dataclass(frozen=True)
class Runtime:
    """What `diagnosd serve` is built from, loaded and cross-checked; it opens nothing by itself."""

    settings: Settings
    rules: Rules
    registry: CollectorRegistry
    clock: Callable[[], datetime]
    source: SourceFactory
    # The circuit's monotonic clock and random source (its cool-downs and their jitter).
    timer: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random
    # A source given to `build` lives in this process only: alert batches are then diagnosed on
    # the daemon's event loop, whatever webhook.processes says.
    injected: bool = False


def build(
    settings: Settings,
    *,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], datetime] | None = None,
    source: SourceFactory | None = None,
    timer: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
) -> Runtime:
    """Load the rules and check the settings against them; raises RulesError or SettingsError."""
    # The settings already hold $DIAGNOSD_RULES_DIR (the settings loader asks rules_dir_variable).
    rules = load(settings.rules_dir or shipped_rules_dir())
    problems = _cross_check(settings, rules)
    if problems:
        raise SettingsError(problems)
    config = settings.prometheus.config()
    return Runtime(
        settings=settings,
        rules=rules,
        registry=registry if registry is not None else CollectorRegistry(),
        clock=clock or utc_now,
        source=source or (lambda: prometheus_source(config)),
        timer=timer,
        rand=rand,
        injected=source is not None,
    )


@asynccontextmanager
async def prometheus_source(config: PrometheusConfig) -> AsyncIterator[QuerySource]:
    """A PrometheusSource whose HTTP client lives as long as the context."""
    async with config.client() as client:
        yield PrometheusSource(config, client)


def _cross_check(settings: Settings, rules: Rules) -> list[Problem]:
    trees = rules.ruleset.trees
    known = ", ".join(trees)
    problems: list[Problem] = []

    def unknown(path: str, symptom: str) -> None:
        problems.append(Problem("settings", None, path, f"unknown symptom {symptom!r} (known: {known})"))

    for alertname, symptom in settings.webhook.alertname_map.items():
        if symptom not in trees:
            unknown(f"webhook.alertname_map.{alertname}", symptom)
    for symptom in settings.scheduler.symptoms:
        if symptom not in trees:
            unknown("scheduler.symptoms", symptom)
    for symptom in settings.findings.for_by_symptom:
        if symptom not in trees:
            unknown(f"findings.for_by_symptom.{symptom}", symptom)
    for symptom, overrides in settings.params.items():
        if symptom not in trees:
            unknown(f"params.{symptom}", symptom)
            continue
        try:
            effective(trees[symptom], overrides)
        except ParamError as error:
            problems.append(Problem("settings", None, f"params.{symptom}.{error.name}", error.reason))
    return problems


@dataclass(frozen=True)
class Services:
    runtime: Runtime
    source: CircuitSource
    store: Store
    memory: DeliveryMemory
    metrics: Metrics
    tracker: Tracker
    diagnoser: Diagnoser
    inbox: Inbox
    scheduler: Scheduler


def guarded(source: QuerySource, runtime: Runtime, metrics: Metrics) -> CircuitSource:
    """`source` behind the circuit the settings describe, its transitions in the self-metrics."""
    prometheus = runtime.settings.prometheus
    circuit = Circuit(
        prometheus.circuit.policy(), redact(prometheus.url), clock=runtime.timer, rand=runtime.rand, watch=metrics
    )
    metrics.circuit_state(circuit.status().state)
    return CircuitSource(source, circuit)


@asynccontextmanager
async def open_services(runtime: Runtime) -> AsyncIterator[Services]:
    settings = runtime.settings
    async with AsyncExitStack() as stack:
        source = await stack.enter_async_context(runtime.source())
        # One database for the findings store and the delivery memory.
        database = open_database(settings.store.location())
        stack.callback(database.close)
        store = Store(database)
        memory = DeliveryMemory(database)
        metrics = Metrics(runtime.registry)
        stack.callback(metrics.close)
        metrics.trees.set(len(runtime.rules.ruleset.trees))
        # One circuit for the daemon's lifetime: every round, alert and request reads through it.
        source = guarded(source, runtime, metrics)
        # Only the replica running the rounds exports findings and pushes them: its view is read
        # again when it takes over and kept fresh by every round; a standby's would be stale, and
        # two replicas would export and push every finding twice. (SQLite: always this one.)
        rounds: list[Scheduler] = []

        def leading() -> bool:
            return bool(rounds) and rounds[0].leading()

        sinks = push_sinks(settings, lambda: tracker.active() if leading() else [], metrics)
        tracker = Tracker(store, _transitions(metrics, sinks))
        for sink in sinks:
            await sink.start()
            stack.push_async_callback(sink.stop)
        ruleset = runtime.rules.ruleset
        diagnoser = _daemon_diagnoser(settings, ruleset, source, metrics, runtime.clock, runtime.timer)
        hook = settings.webhook
        parting: Parting = OnLoop(diagnoser)
        if hook.processes and not runtime.injected:
            parting = Offloaded(
                batch_diagnoser,
                settings,
                ruleset,
                metrics,
                runtime.clock,
                processes=hook.processes,
                circuit=source.circuit,
                fallback=parting,
            )
        # Closed after the inbox has stopped (the exit stack runs backwards).
        stack.push_async_callback(parting.close)
        inbox = Inbox(
            memory,
            tracker,
            diagnoser,
            metrics,
            runtime.clock,
            capacity=hook.queue_size,
            workers=hook.workers,
            max_attempts=hook.max_attempts,
            retry_after=hook.retry_after,
            coalesce_window=hook.coalesce_window,
            strict_labels=settings.prometheus.strict_labels,
            owner=replica(settings),
            lease=hook.lease,
            refresh=settings.store.retention / 10,
            parting=parting,
        )
        await inbox.start()
        stack.push_async_callback(inbox.stop)
        scheduler = Scheduler(settings, diagnoser, tracker, store, memory, inbox, metrics, runtime.clock)
        rounds.append(scheduler)
        scheduler.start()
        stack.push_async_callback(scheduler.stop)
        metrics.attach(
            FindingsCollector(
                lambda: tracker.active() if leading() else [],
                lambda: tracker.states(runtime.clock(), settings.findings.state_ttl) if leading() else [],
                settings.metrics.max_series,
                metrics.dropped,
            )
        )
        # What is alive once the daemon is up (the trees, the settings, the API's pydantic
        # validators, whose schema trees every full collection walks: 60 ms of one on 2 cores)
        # lives as long as it does: moved out of the collector's reach, so that the collections
        # a fleet's diagnosis triggers cost its own objects only. A diagnosis of 1000 targets
        # allocates some 10^5 objects that live until it ends: a young generation of 700 would
        # collect (and promote) them a hundred times over.
        gc.collect()  # what startup left as garbage is freed, not frozen with the rest
        gc.freeze()
        stack.callback(gc.unfreeze)
        threshold = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, *threshold[1:])
        stack.callback(gc.set_threshold, *threshold)
        log.info(
            "diagnosd ready: %d trees, %d active findings, store %s",
            len(runtime.rules.ruleset.trees),
            len(tracker.active()),
            database.path,
        )
        yield Services(runtime, source, store, memory, metrics, tracker, diagnoser, inbox, scheduler)


def _daemon_diagnoser(
    settings: Settings,
    ruleset: RuleSet,
    source: QuerySource,
    observer: Observer,
    clock: Callable[[], datetime],
    timer: Callable[[], float],
) -> Diagnoser:
    """The daemon's Diagnoser on `source` (behind its circuit), as the settings describe it."""
    return Diagnoser(
        # The answers about which metrics exist, kept a little while in front of the circuit
        # (a round, a storm's alerts ask them once).
        LookupCache(source, settings.prometheus.lookup_ttl, clock=timer),
        ruleset,
        observer,
        strict_labels=settings.prometheus.strict_labels,
        params=settings.params,
        topology=settings.topology.topology(),
        clock=clock,
        deadline=Deadline(settings.prometheus.diagnosis_deadline.total_seconds(), settings.prometheus.url),
    )


@asynccontextmanager
async def batch_diagnoser(
    settings: Settings, ruleset: RuleSet, observer: Observer, clock: Callable[[], datetime], circuit: Circuit
) -> AsyncIterator[Diagnoser]:
    """The Diagnoser of an alert batch's diagnosis process (alertmanager/offload.py): the daemon's,
    built again there from the same settings and the rules the daemon loaded, on an HTTP client of
    its own, behind `circuit` (offload.Heard: it keeps what each call met, for the daemon's
    circuit, which admitted the batch, to settle)."""
    async with prometheus_source(settings.prometheus.config()) as source:
        yield _daemon_diagnoser(settings, ruleset, CircuitSource(source, circuit), observer, clock, time.monotonic)


PushSink = AlertmanagerSink | GrafanaSink


def replica(settings: Settings) -> str:
    """Whose the alert states this process claims are: on SQLite the one replica there is (the same
    across restarts, so a restart resumes its own queue at once); on PostgreSQL this host and
    process (a pod's name, and pid 1 in a container: a restarted container resumes its own too)."""
    if not is_url(settings.store.location()):
        return LOCAL
    return f"{socket.gethostname()}:{os.getpid()}"


def push_sinks(settings: Settings, active: Callable[[], list[Finding]], metrics: Metrics) -> list[PushSink]:
    """The opt-in sinks findings are pushed to: derived alerts to Alertmanager, Grafana annotations."""
    external = settings.server.external_url
    sinks: list[PushSink] = []
    am = settings.alertmanager
    if am.urls:
        words = partial(finding_words, lang=str(am.language))
        sinks.append(AlertmanagerSink(am.config(external), active, words, metrics.sink_post))
    grafana = settings.grafana.config(external)
    if grafana is not None:
        words = partial(finding_words, lang=str(settings.grafana.language))
        sinks.append(GrafanaSink(grafana, active, words, metrics.sink_post))
    return sinks


def _transitions(metrics: Metrics, sinks: Sequence[PushSink]) -> Callable[[State], None]:
    """Counts each transition and wakes the push sinks, which then look at the findings themselves."""

    def transition(state: State) -> None:
        metrics.transition(state)
        for sink in sinks:
            sink.wake()

    return transition
