"""A diagnosis's deadline over a source that hangs: the answers in are kept, the rest read unknown
(timeout), nothing is sent after the deadline, and a shutdown's cancellation stays a cancellation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from diagnosd.engine import Evaluator
from diagnosd.errors import SourceTimeout
from diagnosd.findings import Reason, Verdict
from diagnosd.sources.base import Sample
from diagnosd.sources.deadline import Deadline
from diagnosd.trees.model import Tree
from tests.engine.fakes import FakeSource, samples

AT = datetime(2026, 3, 1, 12, tzinfo=UTC)
TEXT = {"zh": "中", "en": "en"}
URL = "http://prometheus.test:9090"
DEADLINE = Deadline(0.5, URL)


@dataclass
class Hanging(FakeSource):
    """Answers like FakeSource, except that queries naming a metric in `hang` never answer."""

    hang: set[str] = field(default_factory=set)
    names_hang: bool = False

    async def query(self, promql: str, at: datetime) -> list[Sample]:
        if any(name in promql for name in self.hang):
            self.queries.append((promql, at))
            await asyncio.get_running_loop().create_future()
        return await super().query(promql, at)

    async def metric_names(
        self, candidates: Collection[str], start: datetime, end: datetime, where: Sequence[str] = ()
    ) -> set[str]:
        if self.names_hang:
            await asyncio.get_running_loop().create_future()
        return await super().metric_names(candidates, start, end, where)

    async def metadata(self, names: Collection[str]) -> dict[str, str] | None:
        return None  # no metadata to ask: names without series stay absent


def tree() -> Tree:
    def check(id_: str, metric: str) -> dict[str, Any]:
        return {
            "id": id_,
            "title": TEXT,
            "query": f"max by ($target) ({metric})",
            "compare": {"above": 0.9},
            "conclusion": {"cause": id_, "title": TEXT, "remediation": [TEXT]},
        }

    return Tree.model_validate(
        {
            "id": "queue_backlog",
            "title": TEXT,
            "target": ["namespace", "pod"],
            "detect": {"title": TEXT, "query": "max by ($target) (waiting)", "compare": {"above": 10}},
            "nodes": [check("kv_full", "kv"), check("preempting", "preempt")],
        }
    )


def fleet(**hanging: Any) -> Hanging:
    pods = {"p0": 20.0}
    answers = {"waiting": samples(pods), "kv": samples({"p0": 0.95}), "preempt": samples({"p0": 0.95})}
    return Hanging(dict(answers), **hanging)


async def test_unanswered_checks_are_unknown_timeout_and_the_answered_ones_stand() -> None:
    began = time.monotonic()
    diagnosis = await Evaluator(DEADLINE.bound(fleet(hang={"preempt"}))).diagnose(tree(), at=AT)
    took = time.monotonic() - began
    [target] = diagnosis.targets
    checks = {c.id: c for c in target.checks}
    assert target.symptom_present is True
    assert checks["kv_full"].verdict == Verdict.MATCHED
    assert (checks["preempting"].verdict, checks["preempting"].reason) == (Verdict.UNKNOWN, Reason.TIMEOUT)
    assert "diagnosis deadline of 0.5s" in (checks["preempting"].detail or "")
    assert took < DEADLINE.seconds * 2


async def test_queries_still_waiting_at_the_deadline_are_never_sent() -> None:
    source = fleet(hang={"waiting", "kv", "preempt"})
    diagnosis = await Evaluator(DEADLINE.bound(source), concurrency=1).diagnose(tree(), at=AT)
    assert len(source.queries) == 1  # the first held its slot until the deadline; the others were not asked
    assert diagnosis.queries == 3
    assert diagnosis.targets == ()


async def test_a_hanging_name_discovery_is_a_timeout_that_names_the_backend() -> None:
    with pytest.raises(SourceTimeout) as raised:
        await Evaluator(DEADLINE.bound(fleet(names_hang=True))).diagnose(tree(), at=AT)
    assert raised.value.url == URL
    assert raised.value.detail == "no answer within the diagnosis deadline of 0.5s (metric name discovery)"


async def test_a_shutdown_before_the_deadline_is_a_cancellation_not_a_timeout() -> None:
    source = Deadline(60, URL).bound(fleet(hang={"waiting"}))
    task = asyncio.create_task(Evaluator(source).diagnose(tree(), at=AT))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
