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
transaction, under the owner's check: a state is diagnosed into findings once across replicas. A
batch's alerts share that transaction (and one lookup, one mark), so a storm of 1000 alerts is a
commit and a few dozen statements, not thousands of commits.
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

from diagnosd.daemon.alertmanager.coalesce import BatchKey, batch_key, window_start
from diagnosd.daemon.alertmanager.memory import AlertRecord, BatchClaim, DeliveryMemory, Lease
from diagnosd.daemon.alertmanager.parts import OnLoop, Parting
from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.daemon.alertmanager.settled import Settled
from diagnosd.daemon.diagnoser import Diagnoser
from diagnosd.engine import Scope
from diagnosd.engine.scope import covering
from diagnosd.errors import DiagnosdError, DiagnosisProcessLost, QueryRejected, QueueFull, SourceError, StoreError
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.model import Diagnosis
from diagnosd.findings.tracker import Recording, Tracker
from diagnosd.sinks.metrics import Metrics

log = logging.getLogger(__name__)

# The owner of every state on a SQLite store: one file, one replica, the same across its restarts.
LOCAL = "local"
LEASE = timedelta(seconds=30)
# A re-send is written to the store only once its memory is this old: a storm's duplicates (HA
# twins, repeat_interval re-sends) are a lookup, not a write transaction each. The inbox's owner
# passes a tenth of the retention, so a re-sent state is remembered at least 90 % of it past its
# last delivery.
REFRESH = timedelta(hours=1)
# A coalesced batch is recorded (one transaction per slice of alerts, each alert's findings with
# its `done`) a slice at a time, the event loop turning between: 300 alerts at once held the
# webhook's acks for 40 ms and more (its cutting into parts turns alike: parts.py).
RECORD_SLICE = 64


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
        refresh: timedelta = REFRESH,
        parting: Parting | None = None,
    ) -> None:
        self._store = store
        self._tracker = tracker
        self._diagnoser = diagnoser
        # Where a batch is diagnosed: on this event loop unless given processes of their own.
        self._parting = parting or OnLoop(diagnoser)
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
        self._settled = Settled(refresh)
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
        lease = self._lease()
        # One lookup for the whole delivery (a group of 300 new alerts is not 300 queries), of the
        # states neither in flight here nor seen settled lately: a storm's re-sends cost none.
        asked = [
            job.key for job in jobs if job.key not in self._inflight and not self._settled.known(job.key, lease.now)
        ]
        known = self._store.alerts(asked)
        records = {key: known.get(key) for key in asked}
        for record in known.values():
            self._settled.note(record)
        fresh = [job for job in jobs if job.key in records and _fresh(records[job.key])]
        needed = self._jobs_needed(fresh)
        if needed and self._waiting >= self._capacity:
            raise QueueFull(self._capacity, needed)
        taken = self._claim(fresh, records, lease)
        queued = tuple(job for job in fresh if job.key in taken)
        for job in queued:
            self._admit(job)
        # Another replica's claim made these its own: duplicates here, as a re-send is.
        duplicates = tuple(job for job in jobs if job.key not in taken)
        # Re-sends of a long-firing alert keep its memory from expiring with the retention; one
        # remembered lately (or in flight here: its mark writes it) needs no write.
        stale = [job.key for job in duplicates if self._settled.due(records.get(job.key), lease.now)]
        if stale:
            for key in self._store.touch(stale, lease.now):
                self._settled.note(records[key], written=lease.now)
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
        opened = {self._batch_key(job) for job in fresh if not job.resolved}
        return sum(job.resolved for job in fresh) + len(opened - self._open.keys())

    def _admit(self, job: AlertJob) -> None:
        """Into a job: a resolution at once, a firing state into its symptom's open batch."""
        self._inflight.add(job.key)
        if job.resolved:
            self._enqueue(_Priority.RESOLVE, Batch([job]), opened=False)
            return
        key = self._batch_key(job)
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

    def _batch_key(self, job: AlertJob) -> BatchKey:
        try:
            target = self._diagnoser.tree(job.symptom).target
        except DiagnosdError:
            target = []  # no tree for it (any more): never coalesced, its diagnosis says why
        return batch_key(job, self._window, self._strict, target)

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
                left = [job for job in batch.jobs if job.key in self._inflight]
                try:
                    self._finish_all(left, Delivery.FAILED, f"{type(error).__name__}: {error}")
                except StoreError as unrecorded:
                    # The store is down too: the failure cannot be recorded, and the states stay
                    # queued under this replica's lease, which it keeps renewing, so neither a
                    # retry nor another replica would take them. They are kept here and tried
                    # again; the worker itself carries on with the next batch.
                    self._retry_later(left, unrecorded)
            finally:
                for job in batch.jobs:
                    self._inflight.discard(job.key)
                self._queue.task_done()
                self._unfinished -= 1
                if not self._unfinished:
                    self._idle.set()

    def _retry_later(self, jobs: Sequence[AlertJob], error: StoreError) -> None:
        wait = self._retry_after.total_seconds()
        log.warning("alerts %s: could not record the failure (%s); trying them again in %gs", _names(jobs), error, wait)
        kept = list(jobs)

        def again() -> None:
            if not self._tasks:  # stopped meanwhile: the store's lease hands them on
                return
            for job in kept:
                if job.key not in self._inflight:  # not re-sent and taken meanwhile
                    self._admit(job)

        asyncio.get_running_loop().call_later(wait, again)

    def _finish(self, job: AlertJob, outcome: Delivery, error: str | None = None) -> None:
        self._finish_all([job], outcome, error)

    def _finish_all(self, jobs: Sequence[AlertJob], outcome: Delivery, error: str | None = None) -> None:
        """Mark every job `outcome` in one transaction (a batch's failure is one commit, not one per alert)."""
        if not jobs:
            return
        recorded = self._store.mark_all((job.key for job in jobs), outcome, self._clock(), error, self._owner)
        for job in jobs:
            if job.key not in recorded:
                log.info(
                    "alert %s (%s): no longer held here, left as another replica has it", job.fingerprint, job.alertname
                )
            self._inflight.discard(job.key)

    async def _handle(self, batch: Batch) -> None:
        if batch.jobs[0].resolved:
            for job in batch.jobs:
                self._resolve(job)
            return
        live = self._live(batch.jobs)
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
            scope = Scope.among(covering(job.scope for job in jobs))
            cut = await self._parting.parts(symptom, scope, Batch(jobs).at, [job.scope for job in jobs])
        except QueryRejected as error:
            log.warning(
                "alerts %s: Prometheus refused the queries of %s, not retried: %s", _names(jobs), symptom, error
            )
            self._finish_all(jobs, Delivery.REJECTED, str(error))
            return
        except (SourceError, DiagnosisProcessLost) as error:
            log.warning("alerts %s: could not diagnose %s: %s", _names(jobs), symptom, error)
            self._finish_all(jobs, Delivery.FAILED, str(error))
            return
        except DiagnosdError as error:
            log.warning("alerts %s: %s", _names(jobs), error)
            self._finish_all(jobs, Delivery.DONE, str(error))
            return
        # Resolutions that came in while it was diagnosed supersede their alerts' parts.
        still = {job.key for job in self._live(jobs)}
        parts = [(job, mine) for job, mine in zip(jobs, cut, strict=True) if job.key in still]
        for job, mine in parts:
            if not mine.targets:
                log.info(
                    "alert %s (%s): no target in %s has data for %s", job.fingerprint, job.alertname, job.scope, symptom
                )
        for start in range(0, len(parts), RECORD_SLICE):
            self._record(parts[start : start + RECORD_SLICE])
            await asyncio.sleep(0)

    def _record(self, parts: Sequence[tuple[AlertJob, Diagnosis]]) -> None:
        """Each alert's findings and its `done`, the alerts of a slice in one transaction, each only
        while its state is still held here."""
        if not parts:
            return
        now = self._clock()
        claims = BatchClaim(self._store, [job.key for job, _ in parts], Delivery.DONE, now, self._owner)
        recordings = [Recording(mine, job.fingerprint, claim=claims.of(job.key)) for job, mine in parts]
        self._tracker.record_many(recordings, trigger=Trigger.ALERT, now=now, for_=timedelta(0))
        for job, _ in parts:
            if not claims.holds(job.key):
                log.info(
                    "alert %s (%s): no longer held here, its diagnosis left unrecorded", job.fingerprint, job.alertname
                )
            self._inflight.discard(job.key)

    def _live(self, jobs: Sequence[AlertJob]) -> list[AlertJob]:
        """The jobs whose resolution has not come first; the others are marked superseded (nothing
        left to diagnose). One lookup and one mark for the whole batch."""
        resolved = self._store.alerts(_resolution(job) for job in jobs)
        overtaken = [job for job in jobs if _resolution(job) in resolved]
        self._finish_all(overtaken, Delivery.SUPERSEDED)
        return [job for job in jobs if _resolution(job) not in resolved]

    def _resolve(self, job: AlertJob) -> None:
        now = self._clock()
        # Superseded first: a replica about to record the firing state's findings then finds it no
        # longer its own, and any it recorded before are resolved just below.
        waiting = (Delivery.QUEUED, Delivery.FAILED)
        self._store.supersede((job.fingerprint, "firing", job.starts_at), now, Delivery.SUPERSEDED, waiting)
        self._tracker.resolve_alert(job.fingerprint, now)
        self._finish(job, Delivery.DONE)


def _resolution(job: AlertJob) -> tuple[str, str, str]:
    """The key of the state that resolves `job`'s firing one."""
    return job.fingerprint, "resolved", job.starts_at


def _fresh(record: AlertRecord | None) -> bool:
    return record is None or record.outcome == Delivery.FAILED


def _names(jobs: Sequence[AlertJob]) -> str:
    shown = ", ".join(f"{job.fingerprint} ({job.alertname})" for job in jobs[:3])
    return shown + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
