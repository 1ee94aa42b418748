"""The alert inbox: new alert states recorded durably, gathered into jobs, worked in the background.

Every distinct alert state (fingerprint, status, startsAt) is remembered in the store when it is
offered, so the same state delivered twice (Alertmanager HA), re-sent every repeat_interval, or
delivered again after a restart is diagnosed once. A firing state whose diagnosis could not run
(Prometheus down) is tried again later; its resolution cancels that. One whose queries Prometheus
refuses (a 4xx) is recorded as rejected, with the reason, and not tried again: it would fail alike.

A job is a batch (coalesce.py): the firing alerts of one symptom received within one
`coalesce_window` wait for the window to close and are diagnosed by one evaluation; a resolution
is a job of its own, worked before any diagnosis. The bound (`queue_size`) counts jobs waiting,
not alerts: a delivery that would add a job is refused only while that many jobs already wait,
and is otherwise taken whole however many alerts it holds, so no delivery is refused forever.

Replicas on one database share the queue (memory.py): each works only the states it claimed, renews
their leases while it holds them, and takes the queued states whose lease lapsed (a replica killed
mid-burst) on its next look. A firing state's findings and its `done` are written in one
transaction, under the owner's check: a state is diagnosed into findings once across replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum

from diagnosd.daemon.alertmanager.coalesce import BatchKey, batch_key, part, shared_scope, window_start
from diagnosd.daemon.alertmanager.memory import AlertRecord, DeliveryMemory, Lease
from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.daemon.diagnoser import Diagnoser
from diagnosd.engine import Scope
from diagnosd.errors import DiagnosdError, QueryRejected, QueueFull, SourceError, StoreError
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import Diagnosis
from diagnosd.findings.tracker import Tracker
from diagnosd.sinks.metrics import Metrics

log = logging.getLogger(__name__)

# The owner of every state on a SQLite store: one file, one replica, the same across its restarts.
LOCAL = "local"
LEASE = timedelta(seconds=30)


class Delivery(StrEnum):
    """Where one alert state's diagnosis stands, as the store remembers it."""

    QUEUED = "queued"  # waiting for a worker (also after a restart)
    DONE = "done"  # diagnosed and recorded, or nothing left to do
    FAILED = "failed"  # could not be diagnosed yet: retried with backoff
    # Prometheus refused the alert's query (a 4xx): failed for good, since a retry fails the same way.
    REJECTED = "rejected"
    SUPERSEDED = "superseded"  # a newer state of the same alert replaced it


class _Priority(IntEnum):
    # Resolutions are cheap (no query) and end findings: they never wait behind a diagnosis.
    RESOLVE = 0
    DIAGNOSE = 1


@dataclass
class Batch:
    """One job: the firing alerts of one symptom and window, or one resolution."""

    jobs: list[AlertJob] = field(default_factory=list)

    @property
    def at(self) -> datetime:
        """When to diagnose: the latest receipt (every one lies within the same window)."""
        return max(job.received_at for job in self.jobs)


@dataclass(frozen=True)
class Offer:
    queued: tuple[AlertJob, ...]
    duplicates: tuple[AlertJob, ...]


class Inbox:
    def __init__(
        self,
        store: DeliveryMemory,
        tracker: Tracker,
        diagnoser: Diagnoser,
        metrics: Metrics,
        clock: Callable[[], datetime],
        *,
        capacity: int,
        workers: int,
        max_attempts: int,
        retry_after: timedelta,
        coalesce_window: timedelta = timedelta(0),
        strict_labels: Sequence[str] = (),
        owner: str = LOCAL,
        lease: timedelta = LEASE,
    ) -> None:
        self._store = store
        self._tracker = tracker
        self._diagnoser = diagnoser
        self._metrics = metrics
        self._clock = clock
        self._queue: asyncio.PriorityQueue[tuple[int, int, Batch]] = asyncio.PriorityQueue()
        self._order = itertools.count()
        self._capacity = capacity
        metrics.queue_capacity.set(capacity)
        self._workers = workers
        self._max_attempts = max_attempts
        self._retry_after = retry_after
        self._window = coalesce_window
        self._strict = tuple(strict_labels)
        self._owner = owner
        self._lease_for = lease
        # Batches still gathering alerts, each closed by a timer of the event loop.
        self._open: dict[BatchKey, Batch] = {}
        # Jobs open or queued (the bound), and jobs not finished (what join() waits for).
        self._waiting = 0
        self._unfinished = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._inflight: set[tuple[str, str, str]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def waiting(self) -> int:
        """Jobs gathering alerts or queued for a worker (what `capacity` bounds)."""
        return self._waiting

    def offer(self, jobs: Sequence[AlertJob]) -> Offer:
        """Record the states not seen before and queue them; raises QueueFull while the backlog is full.

        Answers once the new states are in the store (QUEUED), never after a diagnosis.
        """
        records = {job.key: self._store.alert(job.key) for job in jobs if job.key not in self._inflight}
        fresh = [job for job in jobs if job.key in records and _fresh(records[job.key])]
        needed = self._jobs_needed(fresh)
        if needed and self._waiting >= self._capacity:
            raise QueueFull(self._capacity, needed)
        lease = self._lease()
        taken = self._claim(fresh, records, lease)
        queued = tuple(job for job in fresh if job.key in taken)
        for job in queued:
            self._admit(job)
        # Another replica's claim made these its own: duplicates here, as a re-send is.
        duplicates = tuple(job for job in jobs if job.key not in taken)
        # Re-sends of a long-firing alert keep its memory from expiring with the retention.
        self._store.touch((job.key for job in duplicates), lease.now)
        return Offer(queued, duplicates)

    def _claim(
        self, fresh: Sequence[AlertJob], records: dict[tuple[str, str, str], AlertRecord | None], lease: Lease
    ) -> set[tuple[str, str, str]]:
        """The states of `fresh` this replica now holds: new ones its insert made, failed ones its
        update took (one transaction for all the new: an alert storm is not one commit per alert)."""
        new = [(job.key, job.as_dict()) for job in fresh if records[job.key] is None]
        taken = self._store.claim_new(new, lease) if new else set()
        for job in fresh:
            record = records[job.key]
            if record is not None and self._store.claim(record, lease):
                taken.add(job.key)
        return taken

    def _lease(self) -> Lease:
        now = self._clock()
        return Lease(self._owner, now, now + self._lease_for)

    def _jobs_needed(self, fresh: Sequence[AlertJob]) -> int:
        """How many jobs these states would add: joining a batch still open adds none."""
        opened = {batch_key(job, self._window, self._strict) for job in fresh if not job.resolved}
        return sum(job.resolved for job in fresh) + len(opened - self._open.keys())

    def _admit(self, job: AlertJob) -> None:
        """Into a job: a resolution at once, a firing state into its symptom's open batch."""
        self._inflight.add(job.key)
        if job.resolved:
            self._enqueue(_Priority.RESOLVE, Batch([job]), opened=False)
            return
        key = batch_key(job, self._window, self._strict)
        batch = self._open.get(key)
        if batch is not None:
            batch.jobs.append(job)
            return
        batch = self._open[key] = Batch([job])
        self._waiting += 1
        self._unfinished += 1
        self._idle.clear()
        asyncio.get_running_loop().call_later(self._delay(job), self._close, key)
        self._metrics.queue_length.set(self._waiting)

    def _delay(self, job: AlertJob) -> float:
        """Until the job's window closes (at once when coalescing is off or the window is past)."""
        if self._window <= timedelta(0):
            return 0.0
        end = window_start(job.received_at, self._window) + self._window
        return min(max((end - self._clock()).total_seconds(), 0.0), self._window.total_seconds())

    def _close(self, key: BatchKey) -> None:
        batch = self._open.pop(key)
        self._enqueue(_Priority.DIAGNOSE, batch, opened=True)

    def _enqueue(self, priority: _Priority, batch: Batch, *, opened: bool) -> None:
        if not opened:
            self._waiting += 1
            self._unfinished += 1
            self._idle.clear()
        self._queue.put_nowait((priority, next(self._order), batch))
        self._metrics.queue_length.set(self._waiting)

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(), name=f"alert-worker-{i}") for i in range(self._workers)]
        self._tasks.append(asyncio.create_task(self._keep_leases(), name="alert-leases"))
        self.requeue()

    async def stop(self) -> None:
        """Stop the workers; what is still queued stays remembered as queued and resumes at next
        start, or at once on another replica: its leases are let go."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        try:
            self._store.release(self._owner)
        except StoreError as error:
            log.warning("alerts: could not let go of this replica's leases (they lapse): %s", error)

    async def _keep_leases(self) -> None:
        """Renew what this replica holds and take what a dead one held, three times a lease."""
        every = self._lease_for.total_seconds() / 3
        while True:
            await asyncio.sleep(every)
            try:
                self._store.renew(self._lease())
                self._admit_records(self._store.claim_lapsed(self._lease()))
            except StoreError as error:
                log.warning("alerts: could not renew or take leases: %s", error)

    async def join(self) -> None:
        """Wait until every job offered is done, open batches included (tests, graceful drains)."""
        await self._idle.wait()

    def requeue(self) -> int:
        """Queue what the store holds as queued but nothing works on, and failures due for a retry;
        each claimed first, so two replicas requeueing at once never both take one state."""
        if self._waiting >= self._capacity:
            return 0
        lease = self._lease()
        due = self._store.claim_lapsed(lease)
        failed = self._store.alerts_by_outcome(Delivery.FAILED)
        due += [r for r in failed if self._retry_due(r, lease.now) and self._store.claim(r, lease)]
        # Taken whole, like a delivery: the rest of the bound is for the webhook's next offer.
        return self._admit_records(due)

    def _admit_records(self, records: Iterable[AlertRecord]) -> int:
        jobs = [AlertJob.from_dict(r.request) for r in records if r.key not in self._inflight]
        for job in jobs:
            self._admit(job)
        return len(jobs)

    def _retry_due(self, record: AlertRecord, now: datetime) -> bool:
        if record.key in self._inflight or record.attempts >= self._max_attempts:
            return False
        backoff = self._retry_after * (1 << max(record.attempts - 1, 0))
        return now - record.updated_at >= backoff

    async def _work(self) -> None:
        while True:
            _, _, batch = await self._queue.get()
            self._waiting -= 1
            self._metrics.queue_length.set(self._waiting)
            try:
                await self._handle(batch)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.exception("alerts %s: handling failed", _names(batch.jobs))
                for job in batch.jobs:
                    if job.key in self._inflight:
                        self._finish(job, Delivery.FAILED, f"{type(error).__name__}: {error}")
            finally:
                for job in batch.jobs:
                    self._inflight.discard(job.key)
                self._queue.task_done()
                self._unfinished -= 1
                if not self._unfinished:
                    self._idle.set()

    def _finish(self, job: AlertJob, outcome: Delivery, error: str | None = None) -> None:
        if not self._store.mark(job.key, outcome, self._clock(), error, self._owner):
            log.info(
                "alert %s (%s): no longer held here, left as another replica has it", job.fingerprint, job.alertname
            )
        self._inflight.discard(job.key)

    async def _handle(self, batch: Batch) -> None:
        if batch.jobs[0].resolved:
            for job in batch.jobs:
                self._resolve(job)
            return
        live = [job for job in batch.jobs if not self._overtaken(job)]
        scoped: list[tuple[AlertJob, Scope]] = []
        for job in live:
            try:
                scoped.append((job, Scope.of(job.scope)))
            except DiagnosdError as error:
                log.warning("alert %s (%s): %s", job.fingerprint, job.alertname, error)
                self._finish(job, Delivery.DONE, str(error))
        if not scoped:
            return
        jobs = [job for job, _ in scoped]
        symptom = jobs[0].symptom
        try:
            tree = self._diagnoser.tree(symptom)
            scope = Scope.of(shared_scope(job.scope for job in jobs))
            looked = await self._diagnoser.diagnose(tree, scope, Batch(jobs).at, Trigger.ALERT)
        except QueryRejected as error:
            log.warning(
                "alerts %s: Prometheus refused the queries of %s, not retried: %s", _names(jobs), symptom, error
            )
            for job in jobs:
                self._finish(job, Delivery.REJECTED, str(error))
            return
        except SourceError as error:
            log.warning("alerts %s: could not diagnose %s: %s", _names(jobs), symptom, error)
            for job in jobs:
                self._finish(job, Delivery.FAILED, str(error))
            return
        except DiagnosdError as error:
            log.warning("alerts %s: %s", _names(jobs), error)
            for job in jobs:
                self._finish(job, Delivery.DONE, str(error))
            return
        for job in jobs:
            if self._overtaken(job):
                continue
            mine = part(looked.diagnosis, job.scope)
            if not mine.targets:
                log.info(
                    "alert %s (%s): no target in %s has data for %s", job.fingerprint, job.alertname, job.scope, symptom
                )
            self._record(job, mine)

    def _record(self, job: AlertJob, mine: Diagnosis) -> None:
        """The findings and the `done`, in one transaction, only while the state is still held here."""
        now = self._clock()
        held: list[bool] = []

        def claim() -> bool:
            held.append(self._store.mark_within(job.key, Delivery.DONE, now, None, self._owner))
            return held[-1]

        self._tracker.record(
            mine, trigger=Trigger.ALERT, now=now, for_=timedelta(0), alert=job.fingerprint, claim=claim
        )
        if held != [True]:
            log.info(
                "alert %s (%s): no longer held here, its diagnosis left unrecorded", job.fingerprint, job.alertname
            )
        self._inflight.discard(job.key)

    def _overtaken(self, job: AlertJob) -> bool:
        """Its resolution came first: nothing left to diagnose (marked superseded)."""
        if self._store.alert((job.fingerprint, "resolved", job.starts_at)) is None:
            return False
        self._finish(job, Delivery.SUPERSEDED)
        return True

    def _resolve(self, job: AlertJob) -> None:
        now = self._clock()
        # Superseded first: a replica about to record the firing state's findings then finds it no
        # longer its own, and any it recorded before are resolved just below.
        waiting = (Delivery.QUEUED, Delivery.FAILED)
        self._store.supersede((job.fingerprint, "firing", job.starts_at), now, Delivery.SUPERSEDED, waiting)
        self._tracker.resolve_alert(job.fingerprint, now)
        self._finish(job, Delivery.DONE)


def _fresh(record: AlertRecord | None) -> bool:
    return record is None or record.outcome == Delivery.FAILED


def _names(jobs: Sequence[AlertJob]) -> str:
    shown = ", ".join(f"{job.fingerprint} ({job.alertname})" for job in jobs[:3])
    return shown + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
