"""Findings and a post tally for the push sinks' tests (Alertmanager, Grafana)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta

from diagnosd.findings.fingerprint import fingerprint
from diagnosd.findings.lifecycle import Finding, Phase, State, Trigger
from diagnosd.render.finding import FindingWords, finding_words
from tests.findings.builders import AT, cause

__all__ = ["AT", "Tally", "finding", "words"]


def finding(pod: str, state: State = State.FIRING, active_at: datetime = AT, **labels: str) -> Finding:
    target = {"namespace": "prod", "pod": pod, **labels}
    fired = active_at + timedelta(minutes=1)
    phase = Phase(state, active_at, fired if state is not State.PENDING else None)
    return Finding(
        fingerprint=fingerprint("queue_backlog", "kv_pool_full", target),
        symptom="queue_backlog",
        cause="kv_pool_full",
        labels=target,
        phase=phase,
        last_seen=fired,
        trigger=Trigger.ROUND,
        root_cause=cause("kv_pool_full"),
        evaluated_at=fired,
    )


def words(f: Finding) -> FindingWords:
    return finding_words(f, "en")


class Tally:
    """Counts posts by (sink, outcome), as Metrics.sink_post does; a test awaits a count."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._changed = asyncio.Event()

    def __call__(self, sink: str, outcome: str, n: int) -> None:
        self.counts[(sink, outcome)] += n
        self._changed.set()

    def __getitem__(self, key: tuple[str, str]) -> int:
        return self.counts[key]

    async def reached(self, sink: str, outcome: str, n: int = 1) -> None:
        """Wait until `n` posts had this outcome (the bound only keeps a broken sink from hanging)."""

        async def wait() -> None:
            while self.counts[(sink, outcome)] < n:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), 30)
