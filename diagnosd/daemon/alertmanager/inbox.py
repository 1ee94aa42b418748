"""The alert inbox: a bounded queue of alert jobs, worked by a few tasks in the background.

Every distinct alert state (fingerprint, status, startsAt) is remembered in the store when it is
queued, so the same state delivered twice (Alertmanager HA), re-sent every repeat_interval, or
delivered again after a restart is diagnosed once. A firing state whose diagnosis could not run
(Prometheus down) is tried again later; its resolution cancels that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.daemon.diagnoser import Diagnoser
from diagnosd.engine import Scope
from diagnosd.errors import DiagnosdError, QueueFull, SourceError
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.store import AlertRecord, Store
from diagnosd.findings.tracker import Tracker
from diagnosd.sinks.metrics import Metrics

log = logging.getLogger(__name__)


class Delivery(StrEnum):
    """Where one alert state's diagnosis stands, as the store remembers it."""

    QUEUED = "queued"  # waiting for a worker (also after a restart)
    DONE = "done"  # diagnosed and recorded, or nothing left to do
    FAILED = "failed"  # could not be diagnosed yet: retried with backoff
    SUPERSEDED = "superseded"  # a newer state of the same alert replaced it


@dataclass(frozen=True)
class Offer:
    queued: tuple[AlertJob, ...]
    duplicates: tuple[AlertJob, ...]


class Inbox:
    def __init__(
        self,
        store: Store,
        tracker: Tracker,
        diagnoser: Diagnoser,
        metrics: Metrics,
        clock: Callable[[], datetime],
        *,
        capacity: int,
        workers: int,
        max_attempts: int,
        retry_after: timedelta,
    ) -> None:
        self._store = store
        self._tracker = tracker
        self._diagnoser = diagnoser
        self._metrics = metrics
        self._clock = clock
        self._queue: asyncio.Queue[AlertJob] = asyncio.Queue(capacity)
        self._capacity = capacity
        self._workers = workers
        self._max_attempts = max_attempts
        self._retry_after = retry_after
        self._inflight: set[tuple[str, str, str]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    def offer(self, jobs: Sequence[AlertJob]) -> Offer:
        """Queue the states not seen before, all or none; raises QueueFull when they do not fit."""
        fresh = [job for job in jobs if self._fresh(job)]
        if len(fresh) > self._capacity - self._queue.qsize():
            raise QueueFull(self._capacity, len(fresh))
        now = self._clock()
        for job in fresh:
            self._store.remember(job.key, job.as_dict(), Delivery.QUEUED, now)
            self._put(job)
        duplicates = tuple(job for job in jobs if job not in fresh)
        # Re-sends of a long-firing alert keep its memory from expiring with the retention.
        self._store.touch((job.key for job in duplicates), now)
        return Offer(tuple(fresh), duplicates)

    def _fresh(self, job: AlertJob) -> bool:
        if job.key in self._inflight:
            return False
        record = self._store.alert(job.key)
        return record is None or record.outcome == Delivery.FAILED

    def _put(self, job: AlertJob) -> None:
        self._queue.put_nowait(job)
        self._inflight.add(job.key)
        self._metrics.queue_length.set(self._queue.qsize())

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(), name=f"alert-worker-{i}") for i in range(self._workers)]
        self.requeue()

    async def stop(self) -> None:
        """Stop the workers; what is still queued stays remembered as queued and resumes at next start."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def join(self) -> None:
        """Wait until every queued job is done (tests, graceful drains)."""
        await self._queue.join()

    def requeue(self) -> int:
        """Queue what the store holds as queued but nothing works on, and failures due for a retry."""
        now = self._clock()
        due = [r for r in self._store.alerts_by_outcome(Delivery.QUEUED) if r.key not in self._inflight]
        due += [r for r in self._store.alerts_by_outcome(Delivery.FAILED) if self._retry_due(r, now)]
        count = 0
        for record in due:
            if self._queue.full():
                break
            self._store.remember(record.key, record.request, Delivery.QUEUED, now)
            self._put(AlertJob.from_dict(record.request))
            count += 1
        return count

    def _retry_due(self, record: AlertRecord, now: datetime) -> bool:
        if record.key in self._inflight or record.attempts >= self._max_attempts:
            return False
        backoff = self._retry_after * (1 << max(record.attempts - 1, 0))
        return now - record.updated_at >= backoff

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self._handle(job)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.exception("alert %s (%s): handling failed", job.fingerprint, job.alertname)
                self._store.mark(job.key, Delivery.FAILED, self._clock(), f"{type(error).__name__}: {error}")
            finally:
                self._inflight.discard(job.key)
                self._queue.task_done()
                self._metrics.queue_length.set(self._queue.qsize())

    async def _handle(self, job: AlertJob) -> None:
        if job.resolved:
            self._resolve(job)
            return
        try:
            tree = self._diagnoser.tree(job.symptom)
            looked = await self._diagnoser.diagnose(tree, Scope.of(job.scope), job.received_at, Trigger.ALERT)
        except SourceError as error:
            log.warning("alert %s (%s): could not diagnose %s: %s", job.fingerprint, job.alertname, job.symptom, error)
            self._store.mark(job.key, Delivery.FAILED, self._clock(), str(error))
            return
        except DiagnosdError as error:
            log.warning("alert %s (%s): %s", job.fingerprint, job.alertname, error)
            self._store.mark(job.key, Delivery.DONE, self._clock(), str(error))
            return
        if self._store.alert((job.fingerprint, "resolved", job.starts_at)) is not None:
            self._store.mark(job.key, Delivery.SUPERSEDED, self._clock())
            return
        if not looked.diagnosis.targets:
            log.info(
                "alert %s (%s): no target in %s has data for %s", job.fingerprint, job.alertname, job.scope, job.symptom
            )
        now = self._clock()
        self._tracker.record(looked.diagnosis, trigger=Trigger.ALERT, now=now, for_=timedelta(0), alert=job.fingerprint)
        self._store.mark(job.key, Delivery.DONE, now)

    def _resolve(self, job: AlertJob) -> None:
        now = self._clock()
        self._tracker.resolve_alert(job.fingerprint, now)
        firing = self._store.alert((job.fingerprint, "firing", job.starts_at))
        if firing is not None and firing.outcome in (Delivery.QUEUED, Delivery.FAILED):
            self._store.mark(firing.key, Delivery.SUPERSEDED, now)
        self._store.mark(job.key, Delivery.DONE, now)
