"""Review of 46dc15f (a re-send touches its memory only once it is a tenth of the retention old),
against the retention purge (DeliveryMemory.purge), on each backend: a state re-sent within 90 % of
the retention is never forgotten; one in flight, superseded, or held by another replica keeps its
memory; and another replica's touch of a state it does not hold leaves that state to its owner."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from diagnosd.daemon.alertmanager.inbox import Delivery, Inbox
from diagnosd.daemon.alertmanager.memory import AlertRecord, DeliveryMemory
from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from diagnosd.sinks.metrics import Metrics
from diagnosd.storage import Database, open_database
from tests.daemon.alertmanager.test_inbox import AT, CountingDiagnoser, job

RETENTION = timedelta(hours=10)
REFRESH = RETENTION / 10  # what compose passes
SECOND = timedelta(seconds=1)


@dataclass
class Clock:
    now: datetime = AT

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Replica:
    inbox: Inbox
    memory: DeliveryMemory
    diagnoser: CountingDiagnoser
    database: Database


@dataclass
class Rig:
    clock: Clock
    made: list[Replica] = field(default_factory=list)
    replica: Callable[..., Replica] = field(init=False)

    def record(self, j: AlertJob) -> AlertRecord:
        record = self.made[0].memory.alert(j.key)
        assert record is not None, "forgotten"
        return record

    def purge(self) -> int:
        """What housekeeping runs now: everything not queued last written before now - retention."""
        return self.made[0].memory.purge(self.clock.now - RETENTION)


async def started(diagnoser: CountingDiagnoser) -> None:
    """Until the diagnoser is asked (and held at its gate)."""
    for _ in range(600):
        if diagnoser.calls:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never diagnosed")


@pytest.fixture
async def rig(database_location: Path | str) -> AsyncIterator[Rig]:
    rig = Rig(Clock())

    def replica(owner: str = "local", diagnoser: CountingDiagnoser | None = None) -> Replica:
        database = open_database(database_location)
        memory = DeliveryMemory(database)
        counting = diagnoser if diagnoser is not None else CountingDiagnoser()
        inbox = Inbox(
            memory,
            Tracker(Store(database)),
            counting,  # type: ignore[arg-type]
            Metrics(CollectorRegistry()),
            rig.clock,
            capacity=256,
            workers=1,
            max_attempts=5,
            retry_after=timedelta(seconds=30),
            coalesce_window=timedelta(0),
            owner=owner,
            refresh=REFRESH,
        )
        rig.made.append(Replica(inbox, memory, counting, database))
        return rig.made[-1]

    rig.replica = replica
    try:
        yield rig
    finally:
        for r in rig.made:
            await r.inbox.stop()
            r.database.close()


async def test_a_state_resent_within_nine_tenths_of_the_retention_is_never_forgotten(rig: Rig) -> None:
    one = rig.replica()
    await one.inbox.start()
    alert = job(0)
    one.inbox.offer([alert])
    await one.inbox.join()
    # The worst case, three times over: a re-send just too early to write, then the next one 90 %
    # of the retention later; the purge runs just before each.
    for _ in range(3):
        written = rig.record(alert).updated_at
        for gap in (REFRESH - SECOND, RETENTION * 9 / 10):
            rig.clock.now += gap
            assert rig.purge() == 0
            assert one.inbox.offer([alert]).queued == ()
        assert rig.record(alert).updated_at == rig.clock.now != written
    assert len(one.diagnoser.calls) == 1


async def test_in_flight_resends_write_nothing_and_the_mark_dates_the_memory(rig: Rig) -> None:
    gate = asyncio.Event()
    one = rig.replica(diagnoser=CountingDiagnoser(release=gate))
    await one.inbox.start()
    alert = job(0)
    one.inbox.offer([alert])
    await started(one.diagnoser)
    # A diagnosis longer than the retention (absurd, but the bound): queued, never purged.
    rig.clock.now = AT + RETENTION * 2
    assert one.inbox.offer([alert]).duplicates == (alert,)
    assert rig.record(alert).updated_at == AT  # in flight: no write
    assert rig.purge() == 0
    gate.set()
    await one.inbox.join()
    done = rig.record(alert)
    assert (done.outcome, done.updated_at) == (Delivery.DONE, AT + RETENTION * 2)  # the mark wrote it
    rig.clock.now += RETENTION - SECOND
    assert rig.purge() == 0
    assert one.inbox.offer([alert]).queued == ()
    assert len(one.diagnoser.calls) == 1


async def test_a_superseded_state_resent_late_is_kept_and_not_diagnosed(rig: Rig) -> None:
    gate = asyncio.Event()
    one = rig.replica(diagnoser=CountingDiagnoser(release=gate))
    await one.inbox.start()
    firing, resolved = job(0), job(0, status="resolved")
    one.inbox.offer([firing])
    await started(one.diagnoser)
    rig.clock.now = AT + timedelta(minutes=5)
    one.inbox.offer([resolved])  # worked first: it supersedes the firing state in flight
    gate.set()
    await one.inbox.join()
    assert rig.record(firing).outcome == Delivery.SUPERSEDED
    for _ in range(3):  # an HA twin that keeps re-sending the firing state
        rig.clock.now += RETENTION * 9 / 10
        assert rig.purge() == 0
        assert one.inbox.offer([firing, resolved]).queued == ()
    assert rig.record(firing).updated_at == rig.clock.now
    assert len(one.diagnoser.calls) == 1


async def test_a_failed_state_resent_late_is_claimed_again_not_touched(rig: Rig) -> None:
    one = rig.replica(diagnoser=CountingDiagnoser(fail=True))
    await one.inbox.start()
    alert = job(0)
    one.inbox.offer([alert])
    await one.inbox.join()
    assert rig.record(alert).outcome == Delivery.FAILED
    rig.clock.now += REFRESH * 5
    assert one.inbox.offer([alert]).queued == (alert,)  # fresh again: tried, never a lookup only
    await one.inbox.join()
    record = rig.record(alert)
    assert (record.outcome, record.attempts, record.updated_at) == (Delivery.FAILED, 2, rig.clock.now)


async def test_another_replica_s_resends_keep_the_memory_and_leave_the_claim_to_its_owner(rig: Rig) -> None:
    a, b = rig.replica("a"), rig.replica("b")
    alert = job(0)
    assert a.inbox.offer([alert]).queued == (alert,)
    # b hears the same re-sends while a holds the state, queued, past a refresh: b touches a's row.
    rig.clock.now += REFRESH
    assert b.inbox.offer([alert]).duplicates == (alert,)
    held = rig.record(alert)
    assert (held.outcome, held.owner, held.updated_at) == (Delivery.QUEUED, "a", rig.clock.now)
    await a.inbox.start()
    await a.inbox.join()
    done = rig.record(alert)
    assert (done.outcome, done.attempts) == (Delivery.DONE, 1)  # a's mark still counted
    await b.inbox.start()
    for _ in range(3):
        rig.clock.now += RETENTION * 9 / 10
        assert rig.purge() == 0
        assert b.inbox.offer([alert]).queued == ()
        assert a.inbox.offer([alert]).queued == ()
    await b.inbox.join()
    assert len(a.diagnoser.calls) + len(b.diagnoser.calls) == 1
