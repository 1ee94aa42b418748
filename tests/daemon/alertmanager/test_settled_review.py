"""Review of 43a809e (a re-send of a state seen settled for good within the refresh is answered a
duplicate without a lookup), on each backend: the cached answer is the lookup's, at the refresh's
boundary, with the clock stepped back, across the purge and a second replica's claims, supersedes,
marks and resolutions; a full queue; and the cache's bound."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from diagnosd.daemon.alertmanager.inbox import Delivery, Inbox
from diagnosd.daemon.alertmanager.memory import AlertRecord, DeliveryMemory, Key, Lease
from diagnosd.daemon.alertmanager.payload import AlertJob
from diagnosd.daemon.alertmanager.settled import CAPACITY, Settled
from diagnosd.errors import QueueFull
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from diagnosd.sinks.metrics import Metrics
from diagnosd.storage import Database, open_database
from tests.daemon.alertmanager.test_inbox import AT, CountingDiagnoser, job

RETENTION = timedelta(hours=10)
REFRESH = RETENTION / 10  # what compose passes
SECOND = timedelta(seconds=1)
MICRO = timedelta(microseconds=1)
FINAL = [Delivery.DONE, Delivery.REJECTED, Delivery.SUPERSEDED]


@dataclass
class Clock:
    now: datetime = AT
    reads: int = 0

    def __call__(self) -> datetime:
        self.reads += 1
        return self.now


@dataclass
class Replica:
    owner: str
    inbox: Inbox
    memory: DeliveryMemory
    diagnoser: CountingDiagnoser
    database: Database
    stored: Callable[[Iterable[Key]], dict[Key, AlertRecord]]  # the lookup, uncounted
    looked: list[Key] = field(default_factory=list)  # every key the inbox asked the store about

    def lease(self, now: datetime) -> Lease:
        return Lease(self.owner, now, now + timedelta(seconds=30))


@dataclass
class Rig:
    clock: Clock
    made: list[Replica] = field(default_factory=list)
    replica: Callable[..., Replica] = field(init=False)

    def record(self, j: AlertJob) -> AlertRecord | None:
        return self.made[0].stored([j.key]).get(j.key)

    def state(self, j: AlertJob) -> tuple[str, datetime] | None:
        """The outcome and last write the store holds (None: forgotten)."""
        record = self.record(j)
        return None if record is None else (record.outcome, record.updated_at)

    def purge(self, retention: timedelta = RETENTION) -> int:
        """What housekeeping runs now: everything not queued last written before now - retention."""
        return self.made[0].memory.purge(self.clock.now - retention)

    def settle(self, jobs: Iterable[AlertJob], outcome: str, at: datetime = AT) -> None:
        """The states as a replica that worked them left them: claimed, then marked `outcome`."""
        memory = self.made[0].memory
        states = [(j.key, j.as_dict()) for j in jobs]
        lease = Lease("worker", at, at + timedelta(seconds=30))
        assert memory.claim_new(states, lease) == {key for key, _ in states}
        assert memory.mark_all([key for key, _ in states], outcome, at, None, "worker") == {k for k, _ in states}


@pytest.fixture
async def rig(database_location: Path | str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    rig = Rig(Clock())

    def replica(owner: str = "local", capacity: int = 256, refresh: timedelta = REFRESH) -> Replica:
        database = open_database(database_location)
        memory = DeliveryMemory(database)
        diagnoser = CountingDiagnoser()
        inbox = Inbox(
            memory,
            Tracker(Store(database)),
            diagnoser,  # type: ignore[arg-type]
            Metrics(CollectorRegistry()),
            rig.clock,
            capacity=capacity,
            workers=1,
            max_attempts=5,
            retry_after=timedelta(seconds=30),
            coalesce_window=timedelta(0),
            owner=owner,
            refresh=refresh,
        )
        lookup = memory.alerts
        made = Replica(owner, inbox, memory, diagnoser, database, lookup)

        def counted(keys: Iterable[Key]) -> dict[Key, AlertRecord]:
            asked = list(keys)
            made.looked.extend(asked)
            return lookup(asked)

        monkeypatch.setattr(memory, "alerts", counted)
        rig.made.append(made)
        return made

    rig.replica = replica
    try:
        yield rig
    finally:
        for r in rig.made:
            await r.inbox.stop()
            r.database.close()


@pytest.mark.parametrize("outcome", FINAL)
async def test_a_settled_state_resent_at_the_worst_gaps_is_never_forgotten_nor_taken(rig: Rig, outcome: str) -> None:
    one = rig.replica()
    alert = job(0)
    rig.settle([alert], outcome)
    assert one.inbox.offer([alert]).duplicates == (alert,)  # looked up: cached as written at AT
    one.looked.clear()
    written = AT
    for _ in range(3):
        # Re-sends just too early to write (known: neither a lookup nor a write), then the next one
        # just before the purge would take the memory: looked up again, and written.
        for gap in (REFRESH - SECOND, SECOND / 2, SECOND / 4):
            rig.clock.now += gap
            assert one.inbox.offer([alert]).duplicates == (alert,)
        assert one.looked == []
        rig.clock.now = written + RETENTION - SECOND
        assert rig.purge() == 0
        assert one.inbox.offer([alert]).duplicates == (alert,)
        assert one.looked == [alert.key]
        assert rig.state(alert) == (outcome, rig.clock.now)  # touched
        written = rig.clock.now
        one.looked.clear()
    assert one.diagnoser.calls == []


async def test_the_cache_answers_as_the_lookup_at_the_refresh_boundary(rig: Rig) -> None:
    one = rig.replica()
    alert = job(0)
    rig.settle([alert], Delivery.DONE)
    assert one.inbox.offer([alert]).duplicates == (alert,)  # looked up: noted at its write, AT
    rig.clock.now = AT + REFRESH - MICRO
    assert one.inbox.offer([alert]).duplicates == (alert,)
    assert len(one.looked) == 1  # the lookup would have found it young: no write either way
    rig.clock.now = AT + REFRESH  # the lookup finds it a refresh old (<=): written
    assert one.inbox.offer([alert]).duplicates == (alert,)
    assert len(one.looked) == 2
    assert rig.state(alert) == (Delivery.DONE, AT + REFRESH)
    rig.clock.now = AT + 2 * REFRESH - MICRO  # renewed by that write
    assert one.inbox.offer([alert]).duplicates == (alert,)
    assert len(one.looked) == 2


async def test_a_clock_stepped_back_keeps_the_answer_the_lookup_gives(rig: Rig) -> None:
    one = rig.replica()
    alert = job(0)
    rig.settle([alert], Delivery.DONE)
    rig.clock.now = AT + SECOND
    assert one.inbox.offer([alert]).duplicates == (alert,)
    rig.clock.now = AT - timedelta(days=1)  # its memory now lies in the future: the lookup writes nothing
    assert rig.purge() == 0
    assert one.inbox.offer([alert]).duplicates == (alert,)
    assert len(one.looked) == 1
    assert rig.state(alert) == (Delivery.DONE, AT)
    rig.clock.now = AT + REFRESH  # back on time: looked up and written, as without the cache
    assert one.inbox.offer([alert]).duplicates == (alert,)
    assert len(one.looked) == 2
    assert rig.state(alert) == (Delivery.DONE, AT + REFRESH)


@pytest.mark.parametrize("outcome", FINAL)
async def test_no_path_of_another_replica_takes_a_state_cached_as_settled(rig: Rig, outcome: str) -> None:
    a, b = rig.replica("a"), rig.replica("b")
    firing = job(0)
    rig.settle([firing], outcome)
    assert a.inbox.offer([firing]).duplicates == (firing,)  # a caches it
    rig.clock.now = AT + REFRESH / 2
    now, lease = rig.clock.now, b.lease(rig.clock.now)
    before = rig.record(firing)
    assert before is not None
    # Every claim, mark and supersede b could make, past any lease.
    assert b.inbox.requeue() == 0
    assert b.memory.claim_lapsed(lease) == []
    assert not b.memory.claim(AlertRecord(firing.key, Delivery.FAILED, before.attempts, {}, AT, AT, None), lease)
    assert b.memory.mark_all([firing.key], Delivery.FAILED, now, "x", "b") == set()
    assert not b.memory.supersede(firing.key, now, Delivery.SUPERSEDED, (Delivery.QUEUED, Delivery.FAILED))
    b.memory.renew(lease)
    b.memory.release("b")
    assert rig.purge() == 0
    # b hears the re-send and then the resolution, and works it.
    assert b.inbox.offer([firing]).duplicates == (firing,)
    resolved = job(0, status="resolved")
    assert b.inbox.offer([resolved]).queued == (resolved,)
    await b.inbox.start()
    await b.inbox.join()
    assert rig.state(firing) == (outcome, AT)  # never fresh again, nor written
    assert a.inbox.offer([firing]).duplicates == (firing,)
    assert a.looked == [firing.key]  # cached: and rightly so
    assert a.diagnoser.calls == b.diagnoser.calls == []


async def test_a_full_queue_still_answers_settled_resends_and_reads_the_clock_once(rig: Rig) -> None:
    one = rig.replica(capacity=1)
    settled = [job(n) for n in range(3)]
    rig.settle(settled, Delivery.DONE)
    assert len(one.inbox.offer([job(9, "kv_hit_low")]).queued) == 1  # the bound reached
    assert one.inbox.offer(settled).duplicates == tuple(settled)  # looked up, cached
    reads = rig.clock.reads
    assert one.inbox.offer(settled).duplicates == tuple(settled)  # re-sends are never refused
    assert rig.clock.reads == reads + 1
    looked = len(one.looked)
    with pytest.raises(QueueFull):
        one.inbox.offer([*settled, job(0, "kv_cache_full")])
    assert one.looked[looked:] == [job(0, "kv_cache_full").key]  # the settled ones not asked
    assert rig.record(job(0, "kv_cache_full")) is None


async def test_a_resend_touched_after_a_concurrent_purge_is_not_cached_as_remembered(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A state re-sent a retention after its last write: a looks it up (done, old), and b's
    # housekeeping deletes it between a's lookup and a's touch (two replicas, one database). The
    # touch writes nothing, yet a caches the state as written now: for a refresh, a answers
    # re-sends duplicates that the lookup would find unknown (None: to be taken anew).
    a, b = rig.replica("a"), rig.replica("b")
    alert = job(0)
    rig.settle([alert], Delivery.DONE)
    touch = a.memory.touch

    def purged_first(keys: Iterable[Key], now: datetime) -> set[Key]:
        assert b.memory.purge(now - RETENTION) == 1  # b's housekeeping, in between
        return touch(keys, now)

    monkeypatch.setattr(a.memory, "touch", purged_first)
    rig.clock.now = AT + RETENTION + SECOND
    assert a.inbox.offer([alert]).duplicates == (alert,)
    monkeypatch.setattr(a.memory, "touch", touch)
    assert rig.record(alert) is None  # forgotten: what a lookup answers now
    rig.clock.now += SECOND
    assert a.inbox.offer([alert]).queued == (alert,), "answered from the cache: the store forgot it"


def test_the_cache_is_bounded_and_keeps_the_recently_seen_under_churn() -> None:
    settled = Settled(REFRESH, capacity=100)

    def done(n: int) -> AlertRecord:
        return AlertRecord((f"fp-{n}", "firing", "t"), "done", 1, {}, AT, AT, None)

    for n in range(1000):
        settled.note(done(n))
        assert settled.known(done(0).key, AT)  # seen at every turn: never the one to go
        assert len(settled) <= 100
    assert settled.known(done(999).key, AT)
    assert not settled.known(done(899).key, AT)  # the least recently seen went
    # Re-noting a cached state (a later write) moves it and keeps the newest write.
    settled.note(AlertRecord(done(999).key, "done", 1, {}, AT, AT + REFRESH, None))
    assert settled.known(done(999).key, AT + REFRESH + REFRESH / 2)


def test_the_boundary_of_known_is_the_lookup_s_write_condition() -> None:
    settled = Settled(REFRESH)
    key = ("fp", "firing", "t")
    settled.note(AlertRecord(key, "rejected", 1, {}, AT, AT, None))
    assert settled.known(key, AT - timedelta(days=3))  # a clock stepped back: the lookup writes nothing
    assert settled.known(key, AT + REFRESH - MICRO)
    assert not settled.known(key, AT + REFRESH)  # the lookup would write it: asked
    assert len(settled) == 0


def test_the_cache_at_its_capacity_costs_the_4_mb_its_comment_says() -> None:
    # settled.py: "About 400 bytes an entry ...: 4 MB" (it said 100 bytes and a few MB, at 50 000
    # entries: 20 MB were measured here). What an entry keeps alive is the key as the store's row
    # made it (three strings of its own, a tuple), a datetime, and its slot in the OrderedDict.
    gc.collect()
    tracemalloc.start()
    try:
        settled = Settled(REFRESH)
        for n in range(CAPACITY):
            fingerprint = f"{n * 2654435761 % (1 << 64):016x}"
            key = (fingerprint, "".join(["fir", "ing"]), f"2026-11-29T14:{n % 60:02d}:00Z")
            written = datetime.fromtimestamp(AT.timestamp() + n, UTC)
            settled.note(AlertRecord(key, "done", 1, {}, AT, written, None))
        gc.collect()
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(settled) == CAPACITY
    per_entry = kept / CAPACITY
    assert per_entry <= 450, f"{per_entry:.0f} bytes an entry"
    assert kept <= 4.5e6, f"{kept / 1e6:.1f} MB at capacity"
