"""A Prometheus with a low `--query.max-samples` refuses the heavier queries: the diagnosis says so.

Prometheus answers 422 ("query processing would load too many samples into memory") to a query
that holds more samples at once than its limit, as a Thanos, Mimir or VictoriaMetrics limit
does. Prometheus holds one series' range at a time but every selected series of an instant
selector: here each pod has one queue series and twenty engines' KV series (data parallel), so
with ten pods and a limit of 100 the fixture tree's detect answers (about 30 samples) and its KV
check (about 210) is refused. A refused question is unknown and names the error; it never reads as
"no problem".
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from diagnosd.daemon import compose
from diagnosd.daemon.diagnoser import Looked, Outcome
from diagnosd.engine import Scope
from diagnosd.errors import SourceError
from diagnosd.findings import Reason, Verdict
from diagnosd.findings.lifecycle import Trigger
from diagnosd.promlocal.openmetrics import Series
from diagnosd.sources import PrometheusConfig
from tests.conftest import REPO, StartPrometheus

RULES = REPO / "tests" / "fixtures" / "rules"
AT = datetime(2026, 2, 1, 12, tzinfo=UTC)
PODS = 10
ENGINES = 20
TOO_MANY = "too many samples"


def minutes(name: str, labels: dict[str, str], value: float) -> Series:
    """An hour of one sample a minute up to AT, and the same hour a day earlier (the baseline)."""
    now = [AT - timedelta(minutes=m) for m in range(60, -1, -1)]
    stamps = [t - timedelta(days=1) for t in now] + now
    return Series(name, labels, [(t.timestamp(), value) for t in stamps])


def fleet() -> list[Series]:
    series = []
    for index in range(PODS):
        labels = {"namespace": "prod", "pod": f"vllm-{index}"}
        series.append(minutes("vllm:num_requests_waiting", labels, 25.0))
        for engine in range(ENGINES):
            kv = 0.97 if index == 0 else 0.4
            series.append(minutes("vllm:kv_cache_usage_perc", {**labels, "engine": str(engine)}, kv))
    return series


def diagnose(url: str) -> Looked:
    rules = compose.load(RULES)
    tree = rules.ruleset.trees["queue_backlog"]

    async def run() -> Looked:
        async with compose.diagnoser(PrometheusConfig(url=url, timeout=10.0), rules) as diagnoser:
            return await diagnoser.diagnose(tree, Scope.of({}), AT, Trigger.CLI)

    return asyncio.run(run())


def test_a_refused_query_is_unknown_naming_the_limit_never_clear(start_prometheus: StartPrometheus) -> None:
    unlimited = diagnose(start_prometheus(fleet()).url)
    assert unlimited.complete
    seen = {dict(t.labels)["pod"]: [c.cause for c in t.root_causes] for t in unlimited.diagnosis.targets}
    assert seen["vllm-0"] == ["kv_pool_full"]  # what the limit is about to hide

    prom = start_prometheus(fleet(), extra_args=["--query.max-samples=100"])
    looked = diagnose(prom.url)

    assert looked.outcome is Outcome.PARTIAL
    assert looked.errors
    assert all(TOO_MANY in str(error) for error in looked.errors)
    targets = looked.diagnosis.targets
    assert len(targets) == PODS
    for target in targets:
        assert target.symptom_present is True  # the light detect answered: 25 waiting
        kv = next(c for c in target.checks if c.id == "kv_pool_full")
        assert (kv.verdict, kv.reason) == (Verdict.UNKNOWN, Reason.QUERY_ERROR)
        assert TOO_MANY in (kv.detail or "")
        # vllm-0's full KV pool was not seen: no cause is named, and none is ruled out either.
        assert not target.root_causes


def test_every_query_refused_is_an_error_not_an_empty_diagnosis(start_prometheus: StartPrometheus) -> None:
    prom = start_prometheus(fleet(), extra_args=["--query.max-samples=1"])
    with pytest.raises(SourceError, match=TOO_MANY) as raised:
        diagnose(prom.url)
    assert raised.value.query is not None  # the refused PromQL travels with the error
