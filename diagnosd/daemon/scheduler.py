"""Rounds: every interval, each tree is evaluated across the fleet and its findings recorded.

One tree's failure never stops a round; a round that overruns its interval makes the next one
skip (APScheduler max_instances=1, coalesce), never stack. Replicas on one database take turns:
only the one holding the rounds lock runs them, the others stand by and take over when it is gone.
Housekeeping (retention, expired target states, alert retries) runs on the same scheduler.
Shutdown cancellation is not an error.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobEvent
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

from diagnosd.daemon.alertmanager.inbox import Inbox
from diagnosd.daemon.alertmanager.memory import DeliveryMemory
from diagnosd.daemon.diagnoser import Diagnoser, Outcome
from diagnosd.daemon.settings.model import Settings, Walk
from diagnosd.engine import Scope
from diagnosd.errors import SourceError, StoreError
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from diagnosd.sinks.metrics import Metrics
from diagnosd.sources.base import QuerySource
from diagnosd.sources.memo import MemoSource
from diagnosd.storage.database import Lock
from diagnosd.trees import Tree

log = logging.getLogger(__name__)

ROUND_JOB, HOUSEKEEPING_JOB = "round", "housekeeping"
HOUSEKEEPING_EVERY = timedelta(seconds=60)
# At most this many chunks of expired rows per housekeeping; the rest waits for the next one.
PURGE_CHUNKS = 100


@dataclass(frozen=True)
class RoundResult:
    outcome: Outcome
    trees: dict[str, Outcome]  # symptom -> how its diagnosis went
    seconds: float


class Scheduler:
    def __init__(
        self,
        settings: Settings,
        diagnoser: Diagnoser,
        tracker: Tracker,
        store: Store,
        memory: DeliveryMemory,
        inbox: Inbox,
        metrics: Metrics,
        clock: Callable[[], datetime],
    ) -> None:
        self._settings = settings
        self._diagnoser = diagnoser
        self._tracker = tracker
        self._store = store
        self._memory = memory
        self._inbox = inbox
        self._metrics = metrics
        self._clock = clock
        self._aps: AsyncIOScheduler | None = None
        self._running: set[asyncio.Task[Any]] = set()
        self._leading: bool | None = None  # unknown until the first scheduled round asks

    def trees(self) -> list[Tree]:
        wanted = self._settings.scheduler.symptoms
        return [self._diagnoser.tree(s) for s in wanted] or list(self._diagnoser.ruleset.trees.values())

    def leads(self) -> bool:
        """Whether this replica runs the rounds: it holds the database's rounds lock (SQLite: one
        replica, always). A database that cannot say makes it stand by: nothing could be recorded."""
        try:
            leading = self._store.database.hold(Lock.ROUNDS)
        except StoreError as error:
            log.warning("round: standing by, the store cannot say which replica runs rounds: %s", error)
            leading = False
        if leading and not self._leading:
            leading = self._take_over()
        if leading != self._leading:
            log.info("round: %s", "this replica runs the rounds" if leading else "another replica runs the rounds")
            self._leading = leading
        return leading

    def leading(self) -> bool:
        """What `leads()` last said, without asking the database (the collector asks at each scrape)."""
        return self._leading is True

    def _take_over(self) -> bool:
        """Work from what the replica before left, not from this one's start: the tracker reads the
        findings and target states again. A store that cannot say keeps this replica standing by."""
        try:
            self._tracker.reload()
        except StoreError as error:
            log.warning("round: standing by, cannot read the findings to take over: %s", error)
            return False
        return True

    async def scheduled_round(self) -> RoundResult | None:
        """A round if this replica runs them (one at a time across replicas), else None (standby)."""
        if not self.leads():
            self._metrics.rounds.labels("standby").inc()
            return None
        return await self.run_round()

    async def run_round(self) -> RoundResult:
        """Evaluate every tree once for the configured scope and record what was seen."""
        start = time.perf_counter()
        scope = Scope.of(self._settings.scheduler.scope)
        limit = asyncio.Semaphore(self._settings.scheduler.concurrency)
        trees = self.trees()
        # One moment and one memo for the round: a query two trees ask (same text, same moment)
        # is sent once; the memo goes with the round, so nothing it holds outlives it.
        at = self._clock()
        memo = MemoSource(self._diagnoser.source)
        outcomes = await asyncio.gather(*(self._tree(tree, scope, at, memo, limit) for tree in trees))
        per_tree = dict(zip((t.id for t in trees), outcomes, strict=True))
        values = set(per_tree.values())
        outcome = (
            Outcome.ERROR if values == {Outcome.ERROR} else Outcome.OK if values <= {Outcome.OK} else Outcome.PARTIAL
        )
        seconds = time.perf_counter() - start
        self._metrics.rounds.labels(outcome).inc()
        self._metrics.round_seconds.observe(seconds)
        if outcome is not Outcome.ERROR:
            self._metrics.round_succeeded(self._clock())
        if outcome is not Outcome.OK:
            log.warning("round %s in %.2fs: %s", outcome, seconds, per_tree)
        return RoundResult(outcome, per_tree, seconds)

    async def _tree(
        self, tree: Tree, scope: Scope, at: datetime, source: QuerySource, limit: asyncio.Semaphore
    ) -> Outcome:
        async with limit:
            try:
                narrowed = self._settings.scheduler.walk == Walk.NARROWED
                looked = await self._diagnoser.diagnose(
                    tree, scope, at, Trigger.ROUND, source=source, narrowed=narrowed
                )
                self._tracker.record(
                    looked.diagnosis,
                    trigger=Trigger.ROUND,
                    now=self._clock(),
                    for_=self._settings.findings.pending_for(tree.id),
                    complete_scope=scope.as_dict() if looked.complete else None,
                )
            except SourceError as error:
                log.warning("round: %s could not be diagnosed: %s", tree.id, error)
                return Outcome.ERROR
            except Exception:
                log.exception("round: %s failed", tree.id)
                return Outcome.ERROR
            return looked.outcome

    async def housekeeping(self) -> None:
        now = self._clock()
        before = now - self._settings.store.retention
        for _ in range(PURGE_CHUNKS):
            if self._store.purge(before) + self._memory.purge(before) == 0:
                break
            await asyncio.sleep(0)  # let requests through between chunks
        self._tracker.expire(now, self._settings.findings.state_ttl)
        self._inbox.requeue()
        if not self._settings.scheduler.enabled:
            self.leads()  # no rounds ask: which replica exports the findings is still decided

    def start(self) -> None:
        self.leads()  # known before the first scrape asks `leading()`
        aps = AsyncIOScheduler(timezone=UTC, event_loop=asyncio.get_running_loop())
        now = datetime.now(UTC)
        if self._settings.scheduler.enabled:
            interval = self._settings.scheduler.interval
            aps.add_job(
                self._job(self.scheduled_round),
                IntervalTrigger(seconds=interval.total_seconds(), timezone=UTC),
                id=ROUND_JOB,
                name="round",
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(interval.total_seconds())),
                next_run_time=now,
            )
        aps.add_job(
            self._job(self.housekeeping),
            IntervalTrigger(seconds=HOUSEKEEPING_EVERY.total_seconds(), timezone=UTC),
            id=HOUSEKEEPING_JOB,
            name="housekeeping",
            max_instances=1,
            coalesce=True,
            next_run_time=now,
        )
        aps.add_listener(self._skipped, EVENT_JOB_MAX_INSTANCES)
        aps.start()
        self._aps = aps

    async def stop(self) -> None:
        if self._aps is not None:
            self._aps.shutdown(wait=False)  # cancels the running jobs' tasks
            self._aps = None
        running = [task for task in self._running if not task.done()]
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=10)

    def _skipped(self, event: JobEvent) -> None:
        if event.job_id == ROUND_JOB:
            self._metrics.rounds.labels("skipped").inc()

    def _job(self, work: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[None]]:
        async def job() -> None:
            task = asyncio.current_task()
            assert task is not None
            self._running.add(task)
            try:
                await work()
            except asyncio.CancelledError:
                # Shutdown, not a failure: APScheduler would log it as one if it propagated.
                task.uncancel()
            finally:
                self._running.discard(task)

        job.__name__ = getattr(work, "__name__", "job")
        return job
