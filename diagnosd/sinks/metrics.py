"""Prometheus re-export of findings, and diagnosd's self-metrics, on one injected registry.

The findings collector rebuilds its families at every scrape from the tracker's current state
(client_python's custom-collector pattern): diagnosd_root_cause for firing findings,
diagnosd_symptom_active for targets where the symptom holds, diagnosd_check_value for what each
check saw. Past `max_series` it drops series and counts them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from diagnosd.errors import DeadlineExceeded, QueryRejected, SourceError, SourceTimeout, SourceUnavailable
from diagnosd.findings.lifecycle import Finding, State
from diagnosd.findings.target import TargetState
from diagnosd.sources.circuit import State as CircuitState

ROOT_CAUSE = "diagnosd_root_cause"
SYMPTOM_ACTIVE = "diagnosd_symptom_active"
CHECK_VALUE = "diagnosd_check_value"
# The value of diagnosd_prometheus_circuit_state: worse is higher, so max() over replicas reads right.
CIRCUIT_LEVELS = {CircuitState.CLOSED: 0, CircuitState.HALF_OPEN: 1, CircuitState.OPEN: 2}


class Metrics:
    """Self-metrics: what diagnosd did and how long it took, by trigger and outcome."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        r = registry
        self.diagnoses = Counter("diagnosd_diagnoses", "Diagnoses run", ["trigger", "outcome"], registry=r)
        self.diagnosis_seconds = Histogram(
            "diagnosd_diagnosis_duration_seconds", "Time to run one diagnosis", ["trigger"], registry=r
        )
        self.queries = Counter("diagnosd_prometheus_queries", "Calls to the Prometheus API", ["endpoint"], registry=r)
        self.query_errors = Counter(
            "diagnosd_prometheus_query_errors", "Failed calls to the Prometheus API", ["endpoint", "error"], registry=r
        )
        self.query_seconds = Histogram(
            "diagnosd_prometheus_query_duration_seconds", "Prometheus API call latency", ["endpoint"], registry=r
        )
        self.circuit = Gauge(
            "diagnosd_prometheus_circuit_state",
            "The circuit around Prometheus: 0 closed (queries go), 1 half-open (one probe goes), 2 open (none go)",
            registry=r,
        )
        self.circuit_openings = Counter(
            "diagnosd_prometheus_circuit_opened", "Times the circuit around Prometheus opened", registry=r
        )
        self.deliveries = Counter(
            "diagnosd_webhook_deliveries", "Alertmanager webhook deliveries", ["outcome"], registry=r
        )
        self.alerts = Counter("diagnosd_webhook_alerts", "Alerts in webhook deliveries", ["outcome"], registry=r)
        self.queue_length = Gauge("diagnosd_alert_queue_length", "Alert jobs waiting for a worker", registry=r)
        # Exported so an alert can say "near full" whatever webhook.queue_size the deployment set.
        self.queue_capacity = Gauge(
            "diagnosd_alert_queue_capacity", "Alert jobs the queue holds before answering 503", registry=r
        )
        self.rounds = Counter("diagnosd_rounds", "Scheduler rounds", ["outcome"], registry=r)
        self.round_seconds = Histogram(
            "diagnosd_round_duration_seconds",
            "Time to run one round",
            registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
        )
        self.last_round = Gauge(
            "diagnosd_last_successful_round_timestamp_seconds", "When the last successful round ended", registry=r
        )
        self.trees = Gauge("diagnosd_trees_loaded", "Troubleshooting trees loaded", registry=r)
        # Per tree, like Prometheus's per-rule-group evaluation metrics: which tree cannot look.
        self.tree_last_success = Gauge(
            "diagnosd_tree_last_success_timestamp_seconds",
            "When a diagnosis of the tree last completed with every query answered",
            ["symptom"],
            registry=r,
        )
        self.tree_errors = Counter(
            "diagnosd_tree_errors",
            "Diagnoses of the tree that met query errors, once per kind of error met",
            ["symptom", "reason"],
            registry=r,
        )
        self.transitions = Counter("diagnosd_finding_transitions", "Findings entering a state", ["state"], registry=r)
        # outcome: sent, failed (tried again later), rejected (refused for good), dropped (a full queue
        # let go of its oldest finding: counted per finding, not per post).
        self.sink_posts = Counter(
            "diagnosd_sink_posts", "Posts of findings to Alertmanager and Grafana", ["sink", "outcome"], registry=r
        )
        # Exported by the findings collector itself, so a scrape reports its own drops.
        self.dropped = Counter(
            "diagnosd_exported_series_dropped", "Finding series not exported: over metrics.max_series", registry=None
        )
        self._collectors: list[object] = [
            self.diagnoses,
            self.diagnosis_seconds,
            self.queries,
            self.query_errors,
            self.query_seconds,
            self.circuit,
            self.circuit_openings,
            self.deliveries,
            self.alerts,
            self.queue_length,
            self.queue_capacity,
            self.rounds,
            self.round_seconds,
            self.last_round,
            self.trees,
            self.tree_last_success,
            self.tree_errors,
            self.transitions,
            self.sink_posts,
        ]

    def query(self, endpoint: str, seconds: float, error: SourceError | None) -> None:
        self.queries.labels(endpoint).inc()
        self.query_seconds.labels(endpoint).observe(seconds)
        if error is not None:
            self.query_errors.labels(endpoint, error_kind(error)).inc()

    def circuit_state(self, state: CircuitState) -> None:
        self.circuit.set(CIRCUIT_LEVELS[state])

    def circuit_opened(self) -> None:
        self.circuit_openings.inc()

    def transition(self, state: State) -> None:
        self.transitions.labels(str(state)).inc()

    def sink_post(self, sink: str, outcome: str, count: int = 1) -> None:
        self.sink_posts.labels(sink, outcome).inc(count)

    def round_succeeded(self, at: datetime) -> None:
        self.last_round.set(at.timestamp())

    def trees_loaded(self, symptoms: Iterable[str]) -> None:
        """Every tree's series from the start, so a tree never diagnosed or never failing reads 0
        rather than absent (an alert on absent series cannot tell "fine" from "not exported")."""
        for symptom in symptoms:
            self.tree_last_success.labels(symptom)
            for reason in ErrorKind:
                self.tree_errors.labels(symptom, reason)

    def diagnosed(
        self,
        symptom: str,
        trigger: str,
        outcome: str,
        seconds: float,
        errors: Sequence[SourceError],
        succeeded_at: datetime | None,
    ) -> None:
        """One diagnosis ended: counted by trigger and outcome, timed, and its tree's health set
        (`succeeded_at`: when it completed with every query answered; None when it did not)."""
        self.diagnoses.labels(trigger, outcome).inc()
        self.diagnosis_seconds.labels(trigger).observe(seconds)
        if succeeded_at is not None:
            self.tree_succeeded(symptom, succeeded_at)
        self.tree_failed(symptom, errors)

    def tree_succeeded(self, symptom: str, at: datetime) -> None:
        """A diagnosis of the tree completed with every query answered."""
        self.tree_last_success.labels(symptom).set(at.timestamp())

    def tree_failed(self, symptom: str, errors: Iterable[SourceError]) -> None:
        """A diagnosis of the tree met these query errors: each kind counts once."""
        for kind in sorted({error_kind(error) for error in errors}):
            self.tree_errors.labels(symptom, kind).inc()

    def attach(self, collector: FindingsCollector) -> None:
        self.registry.register(collector)
        self._collectors.append(collector)

    def close(self) -> None:
        """Unregister everything, so a new app can use the same registry."""
        for collector in self._collectors:
            self.registry.unregister(collector)  # type: ignore[arg-type]
        self._collectors.clear()


class ErrorKind(StrEnum):
    """The closed set of `error`/`reason` label values: one per SourceError kind, never free text."""

    UNAVAILABLE = "unavailable"
    TIMEOUT = "timeout"
    DEADLINE = "deadline"
    REJECTED = "rejected"
    PROTOCOL = "protocol"


def error_kind(error: SourceError) -> ErrorKind:
    if isinstance(error, SourceUnavailable):
        return ErrorKind.UNAVAILABLE
    if isinstance(error, DeadlineExceeded):  # before its base, SourceTimeout
        return ErrorKind.DEADLINE
    if isinstance(error, SourceTimeout):
        return ErrorKind.TIMEOUT
    if isinstance(error, QueryRejected):
        return ErrorKind.REJECTED
    return ErrorKind.PROTOCOL


class FindingsCollector:
    """Rebuilds the finding families at each scrape; never more than `max_series` series."""

    def __init__(
        self,
        findings: Callable[[], Iterable[Finding]],
        states: Callable[[], Iterable[TargetState]],
        max_series: int,
        dropped: Counter,
    ) -> None:
        self._findings = findings
        self._states = states
        self._max = max_series
        self._dropped = dropped

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        root, active, checks = self._families()
        budget = _Budget(self._max)
        for f in self._findings():
            if f.state is State.FIRING and budget.take():
                labels = {"symptom": f.symptom, "cause": f.cause, "severity": str(f.severity)}
                root.add_sample(ROOT_CAUSE, _with_target(labels, f.labels), 1.0)
        states = list(self._states())
        for s in states:
            if s.present and budget.take():
                active.add_sample(SYMPTOM_ACTIVE, _with_target({"symptom": s.symptom}, s.labels), 1.0)
        for s in states:
            for check, value in s.values.items():
                if budget.take():
                    checks.add_sample(
                        CHECK_VALUE, _with_target({"symptom": s.symptom, "check": check}, s.labels), value
                    )
        if budget.over:
            self._dropped.inc(budget.over)
        yield from (root, active, checks)
        yield from self._dropped.collect()

    @staticmethod
    def _families() -> tuple[Metric, Metric, Metric]:
        return (
            Metric(ROOT_CAUSE, "1 while a finding (a root cause of a symptom on a target) is firing", "gauge"),
            Metric(SYMPTOM_ACTIVE, "1 while the last diagnosis saw the symptom on the target", "gauge"),
            Metric(CHECK_VALUE, "The value a check of the tree saw at the last diagnosis", "gauge"),
        )


class _Budget:
    def __init__(self, limit: int) -> None:
        self.left = limit
        self.over = 0

    def take(self) -> bool:
        if self.left > 0:
            self.left -= 1
            return True
        self.over += 1
        return False


def _with_target(fixed: dict[str, str], target: Mapping[str, str]) -> dict[str, str]:
    """Fixed labels first; a target label that clashes with one of them is exported as target_<name>."""
    out = dict(fixed)
    for name, value in target.items():
        out[f"target_{name}" if name in fixed else name] = value
    return out
