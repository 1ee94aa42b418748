"""A diagnosd store as the first schema wrote it, frozen: the schema text, one row of each table as
that code stored them (generated once, pasted as literals) and the Finding the findings row holds.

Never edit these to follow a change of the code: they are the data a deployed store already has.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

from diagnosd.findings.lifecycle import Finding, Phase, ResolvedBy, State, Trigger
from diagnosd.findings.model import Evidence, Reason, RootCause, Verdict
from diagnosd.trees.model import Severity, Text

# The schema of user_version 1, verbatim.
SCHEMA = """
CREATE TABLE findings (
    fingerprint TEXT NOT NULL, active_at REAL NOT NULL,
    symptom TEXT NOT NULL, cause TEXT NOT NULL, severity TEXT NOT NULL, labels TEXT NOT NULL,
    state TEXT NOT NULL, fired_at REAL, resolved_at REAL, resolved_by TEXT,
    last_seen REAL NOT NULL, evaluated_at REAL NOT NULL, trigger TEXT NOT NULL,
    alerts TEXT NOT NULL, root_cause TEXT NOT NULL,
    PRIMARY KEY (fingerprint, active_at)
);
CREATE INDEX findings_state ON findings (state, resolved_at);
CREATE INDEX findings_symptom ON findings (symptom, cause);
CREATE TABLE targets (
    symptom TEXT NOT NULL, labels TEXT NOT NULL, present INTEGER, "values" TEXT NOT NULL,
    evaluated_at REAL NOT NULL, trigger TEXT NOT NULL,
    PRIMARY KEY (symptom, labels)
);
CREATE TABLE alerts (
    fingerprint TEXT NOT NULL, status TEXT NOT NULL, starts_at TEXT NOT NULL,
    outcome TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, request TEXT NOT NULL,
    received_at REAL NOT NULL, updated_at REAL NOT NULL, error TEXT,
    PRIMARY KEY (fingerprint, status, starts_at)
);
CREATE INDEX alerts_outcome ON alerts (outcome, updated_at);
"""
FINDING_COLUMNS = (
    "fingerprint, active_at, symptom, cause, severity, labels, state, fired_at, resolved_at, resolved_by, "
    "last_seen, evaluated_at, trigger, alerts, root_cause"
)

AT = datetime(2026, 11, 29, 14, 24, 44, tzinfo=UTC)


def _at(minutes: int) -> datetime:
    return datetime.fromtimestamp(AT.timestamp() + 60 * minutes, UTC)


_SUSTAINED = Evidence(
    check="kv_pool_full/usage",
    query='max by (namespace, pod) (vllm:kv_cache_usage_perc{namespace="prod"})',
    operator="above",
    threshold=0.9,
    value=0.97,
    unit="ratio",
    title=Text(zh="KV 缓存占用", en="KV cache usage"),
    verdict=Verdict.MATCHED,
    current=0.99,
    sustained_for="10m",
    share=0.8,
)
_UNKNOWN = Evidence(
    check="kv_pool_full/preemptions",
    query="sum by (namespace, pod) (rate(vllm:num_preemptions_total[5m]))",
    operator="ratio_above",
    threshold=2.0,
    baseline=0.0,
    baseline_at=_at(-1440),
    warnings=("store 10.0.0.7:10901 down",),
    title=Text(zh="抢占", en="preemptions"),
    verdict=Verdict.UNKNOWN,
    reason=Reason.PARTIAL,
    detail="a partial answer clears nothing",
)
_COMBINED = replace(
    _SUSTAINED,
    check="kv_pool_full",
    title=None,
    verdict=None,
    combine="all",
    conditions=(_SUSTAINED, _UNKNOWN),
    assumed={"max_num_seqs": math.inf, "engine": "vllm"},
    context={"gpu_memory_utilization": 0.9, "idle": math.nan},
)
_CONSEQUENCE = RootCause(
    cause="queue_grows",
    title=Text(zh="队列增长", en='queue "grows"'),
    severity=Severity.INFO,
    remediation=(),
    check="queue_grows",
    depth=2,
    excess=-math.inf,
    evidence=(
        Evidence(check="queue_grows", query="sum(vllm:num_requests_waiting)", operator="above", threshold=10, value=40),
    ),
    explained_by=("kv_pool_full",),
)
FINDING = Finding(
    fingerprint="5c1f0e4b2a9d7f31",
    symptom="queue_backlog",
    cause="kv_pool_full",
    labels={"namespace": "prod", "pod": 'vllm-"0"\\ü'},
    phase=Phase(State.RESOLVED, AT, _at(3), _at(42)),
    last_seen=_at(40),
    trigger=Trigger.ALERT,
    root_cause=RootCause(
        cause="kv_pool_full",
        title=Text(zh="KV 缓存池已满", en="KV cache pool full"),
        severity=Severity.CRITICAL,
        remediation=(Text(zh="增加显存", en="add GPU memory"), Text(zh="降低并发", en="lower max_num_seqs")),
        check="kv_pool_full",
        depth=1,
        excess=1.0777777777777777,
        evidence=(_COMBINED,),
        caveat=Text(zh="仅限 vLLM", en="vLLM only"),
        explains=(_CONSEQUENCE,),
    ),
    evaluated_at=_at(40),
    alerts=("0d6ac019b0dad439", "a1b2c3d4e5f60718"),
    resolved_by=ResolvedBy.ALERT,
)

# FINDING as the first schema's code stored it (generated once from that code, pasted).
FINDING_ROW = (
    "5c1f0e4b2a9d7f31",
    1795962284.0,
    "queue_backlog",
    "kv_pool_full",
    "critical",
    '{"namespace":"prod","pod":"vllm-\\"0\\"\\\\ü"}',
    "resolved",
    1795962464.0,
    1795964804.0,
    "alert_resolved",
    1795964684.0,
    1795964684.0,
    "alert",
    '["0d6ac019b0dad439", "a1b2c3d4e5f60718"]',
    '{"cause": "kv_pool_full", "title": {"en": "KV cache pool full", "zh": "KV 缓存池已满"}, "severity": "critical", '
    '"remediation": [{"en": "add GPU memory", "zh": "增加显存"}, {"en": "lower max_num_seqs", "zh": "降低并发"}], '
    '"caveat": {"en": "vLLM only", "zh": "仅限 vLLM"}, "check": "kv_pool_full", "depth": 1, "excess": '
    '1.0777777777777777, "evidence": [{"check": "kv_pool_full", "query": "max by (namespace, pod) '
    '(vllm:kv_cache_usage_perc{namespace=\\"prod\\"})", "operator": "above", "value": 0.97, "baseline": null, '
    '"baseline_at": null, "threshold": 0.9, "compared": 0.97, "unit": "ratio", "assumed": {"max_num_seqs": '
    '"+Inf", "engine": "vllm"}, "context": {"gpu_memory_utilization": 0.9, "idle": "NaN"}, "warnings": [], '
    '"combine": "all", "conditions": [{"check": "kv_pool_full/usage", "query": "max by (namespace, pod) '
    '(vllm:kv_cache_usage_perc{namespace=\\"prod\\"})", "operator": "above", "value": 0.97, "baseline": null, '
    '"baseline_at": null, "threshold": 0.9, "compared": 0.97, "unit": "ratio", "assumed": {}, "context": {}, '
    '"warnings": [], "combine": null, "conditions": [], "title": {"en": "KV cache usage", "zh": "KV 缓存占用"}, '
    '"verdict": "matched", "reason": null, "detail": null, "sustained": {"for": "10m", "share": 0.8, "current": '
    '0.99}}, {"check": "kv_pool_full/preemptions", "query": "sum by (namespace, pod) '
    '(rate(vllm:num_preemptions_total[5m]))", "operator": "ratio_above", "value": null, "baseline": 0.0, '
    '"baseline_at": "2026-11-28T14:24:44Z", "threshold": 2.0, "compared": null, "unit": null, "assumed": {}, '
    '"context": {}, "warnings": ["store 10.0.0.7:10901 down"], "combine": null, "conditions": [], "title": '
    '{"en": "preemptions", "zh": "抢占"}, "verdict": "unknown", "reason": "partial", "detail": "a partial answer '
    'clears nothing", "sustained": null}], "title": null, "verdict": null, "reason": null, "detail": null, '
    '"sustained": {"for": "10m", "share": 0.8, "current": 0.99}}], "explained_by": [], "explains": [{"cause": '
    '"queue_grows", "title": {"en": "queue \\"grows\\"", "zh": "队列增长"}, "severity": "info", "remediation": [], '
    '"caveat": null, "check": "queue_grows", "depth": 2, "excess": "-Inf", "evidence": [{"check": '
    '"queue_grows", "query": "sum(vllm:num_requests_waiting)", "operator": "above", "value": 40, "baseline": '
    'null, "baseline_at": null, "threshold": 10, "compared": 40, "unit": null, "assumed": {}, "context": {}, '
    '"warnings": [], "combine": null, "conditions": [], "title": null, "verdict": null, "reason": null, '
    '"detail": null, "sustained": null}], "explained_by": ["kv_pool_full"], "explains": []}]}',
)
# Target states and one delivery (queued, then failed once), as that code stored them.
TARGET_ROWS = [
    (
        "queue_backlog",
        '{"namespace":"prod","pod":"vllm-0"}',
        1,
        '{"detect": 20.0, "kv_pool_full": 0.97}',
        1795964684.0,
        "alert",
    ),
    ("ttft_high", '{"pod":"vllm-1"}', None, "{}", 1795964744.0, "round"),
]
ALERT_ROWS = [
    (
        "0d6ac019b0dad439",
        "firing",
        "2026-11-29T14:24:44+00:00",
        "failed",
        1,
        '{"symptom": "queue_backlog", "scope": {"namespace": "prod"}}',
        1795962344.0,
        1795962404.0,
        "SourceUnavailable: cannot reach Prometheus",
    )
]


def without_nan(f: Finding) -> Finding:
    """FINDING holds a NaN, which equals nothing, itself included: compare the rest, the NaN apart."""
    [evidence] = f.root_cause.evidence
    context = {k: v for k, v in evidence.context.items() if v is None or not math.isnan(v)}
    return replace(f, root_cause=replace(f.root_cause, evidence=(replace(evidence, context=context),)))
