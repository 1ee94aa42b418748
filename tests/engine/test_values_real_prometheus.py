"""What a real Prometheus answers for x/0: +Inf and -Inf are unknown with a reason, never measurements."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from diagnosd.engine import Evaluator
from diagnosd.findings import Reason, Verdict
from diagnosd.promlocal.openmetrics import Series
from diagnosd.sources import PrometheusConfig, PrometheusSource
from diagnosd.trees.model import Tree
from tests.conftest import StartPrometheus

TEXT = {"zh": "中", "en": "en"}
START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def tree() -> Tree:
    def check(id_: str, query: str, compare: dict[str, object]) -> dict[str, object]:
        conclusion = {"cause": id_, "title": TEXT, "remediation": [TEXT]}
        return {"id": id_, "title": TEXT, "query": query, "compare": compare, "conclusion": conclusion}

    return Tree.model_validate(
        {
            "id": "queue_backlog",
            "title": TEXT,
            "target": ["namespace", "pod"],
            # Waiting requests per free slot: x/0 where no slot is free.
            "detect": {
                "title": TEXT,
                "query": "max by ($target) (waiting) / max by ($target) (free_slots)",
                "compare": {"above": 1},
            },
            "nodes": [
                check("kv_pool_full", "max by ($target) (kv_used) / max by ($target) (kv_size)", {"above": 0.9}),
                check("slots_full", "max by ($target) (running) / max by ($target) (free_slots)", {"above": 0.9}),
            ],
        }
    )


def gauge(name: str, pod: str, value: float) -> Series:
    return Series(name, {"namespace": "prod", "pod": pod}, [(START + 15 * i, value) for i in range(41)])


def test_inf_and_minus_inf_from_a_real_prometheus_are_unknown(start_prometheus: StartPrometheus) -> None:
    series = [
        # inf-0: +Inf queue (a waiting queue and no free slot) and a +Inf KV ratio.
        gauge("waiting", "inf-0", 40),
        gauge("free_slots", "inf-0", 0),
        gauge("running", "inf-0", 8),
        gauge("kv_used", "inf-0", 5),
        gauge("kv_size", "inf-0", 0),
        # neg-0: -Inf detect (a negative gauge over 0) reads unknown, not clear.
        gauge("waiting", "neg-0", -1),
        gauge("free_slots", "neg-0", 0),
        gauge("running", "neg-0", 8),
        gauge("kv_used", "neg-0", 0.95),
        gauge("kv_size", "neg-0", 1),
        # ok-0: finite everywhere, the symptom present and the KV pool full.
        gauge("waiting", "ok-0", 40),
        gauge("free_slots", "ok-0", 4),
        gauge("running", "ok-0", 1),
        gauge("kv_used", "ok-0", 0.95),
        gauge("kv_size", "ok-0", 1),
    ]
    prom = start_prometheus(series)
    at = datetime.fromtimestamp(START + 600, UTC)

    async def run() -> object:
        config = PrometheusConfig(url=prom.url, timeout=10.0)
        async with config.client() as client:
            return await Evaluator(PrometheusSource(config, client)).diagnose(tree(), None, at)

    diagnosis = asyncio.run(run())
    targets = {t.labels["pod"]: t for t in diagnosis.targets}  # type: ignore[attr-defined]

    inf = targets["inf-0"]
    assert inf.symptom_present is None
    assert (inf.detect.verdict, inf.detect.reason) == (Verdict.UNKNOWN, Reason.INFINITE)
    assert "+Inf (division by zero)" in str(inf.detect.detail)
    assert inf.root_causes == ()
    checks = {c.id: c for c in inf.checks}
    assert (checks["kv_pool_full"].verdict, checks["kv_pool_full"].reason) == (Verdict.UNKNOWN, Reason.INFINITE)
    assert (checks["slots_full"].verdict, checks["slots_full"].reason) == (Verdict.UNKNOWN, Reason.INFINITE)
    assert inf.possible_causes == ()

    neg = targets["neg-0"]
    assert neg.symptom_present is None
    assert neg.detect.reason is Reason.INFINITE
    assert "-Inf" in str(neg.detect.detail)
    assert neg.root_causes == ()
    assert [c.cause for c in neg.possible_causes] == ["kv_pool_full"]

    ok = targets["ok-0"]
    assert ok.symptom_present is True
    assert [c.cause for c in ok.root_causes] == ["kv_pool_full"]
