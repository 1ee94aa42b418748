"""Two replicas sharing one alert queue through the database (each backend): every alert state offered
to both is claimed by one, a dead replica's claims are taken once its lease lapses, a replica that
lost its lease can neither mark nor record, and two replicas requeueing at once take each state once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from diagnosd.daemon.alertmanager.inbox import Delivery, Inbox
from diagnosd.daemon.alertmanager.memory import DeliveryMemory, Lease
from diagnosd.errors import StoreError
from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from diagnosd.sinks.metrics import Metrics
from diagnosd.storage import Database, open_database
from tests.daemon.alertmanager.test_inbox import AT, CountingDiagnoser, job
from tests.findings.builders import diagnosis, holding

LEASE = timedelta(seconds=30)


@dataclass
class Replica:
    inbox: Inbox
    memory: DeliveryMemory
    tracker: Tracker
    diagnoser: CountingDiagnoser
    database: Database


@dataclass
class Clock:
    now: datetime = AT

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def replicas(database_location: Path | str) -> AsyncIterator[tuple[Clock, Callable[[str], Replica]]]:
    """replica(owner): an inbox of its own (own connection, own tracker) on the one database, not
    started; every one is stopped and closed at the end. The clock is shared and moved by the test."""
    clock = Clock()
    made: list[Replica] = []

    def replica(owner: str) -> Replica:
        database = open_database(database_location)
        memory, tracker, diagnoser = DeliveryMemory(database), Tracker(Store(database)), CountingDiagnoser()
        inbox = Inbox(
            memory,
            tracker,
            diagnoser,  # type: ignore[arg-type]
            Metrics(CollectorRegistry()),
            clock,
            capacity=256,
            workers=2,
            max_attempts=5,
            retry_after=timedelta(seconds=30),
            coalesce_window=timedelta(0),
            owner=owner,
            lease=LEASE,
        )
        made.append(Replica(inbox, memory, tracker, diagnoser, database))
        return made[-1]

    try:
        yield clock, replica
    finally:
        for r in made:
            await r.inbox.stop()
            r.database.close()


async def test_a_storm_offered_to_both_is_diagnosed_once_across_them(
    replicas: tuple[Clock, Callable[[str], Replica]],
) -> None:
    _, replica = replicas
    a, b = replica("a"), replica("b")
    storm = [job(n) for n in range(20)]
    # Alertmanager's one receiver with both replicas' URLs: each delivery reaches both.
    offers = [(a.inbox.offer(storm[i : i + 5]), b.inbox.offer(storm[i : i + 5])) for i in range(0, 20, 5)]
    by_a = {j.key for first, _ in offers for j in first.queued}
    by_b = {j.key for _, second in offers for j in second.queued}
    assert by_a.isdisjoint(by_b)
    assert by_a | by_b == {j.key for j in storm}
    assert all(len(first.duplicates) == 5 - len(first.queued) for first, _ in offers)
    for r in (a, b):
        await r.inbox.start()
    for r in (a, b):
        await r.inbox.join()
    pods = sorted(scope.as_dict()["pod"] for r in (a, b) for _, scope, _ in r.diagnoser.calls)
    assert pods == sorted(j.scope["pod"] for j in storm)  # each alert evaluated once, by one replica
    records = [a.memory.alert(j.key) for j in storm]
    assert {(r.outcome, r.attempts) for r in records if r is not None} == {(Delivery.DONE, 1)}
    a.tracker.reload()
    linked = {f.labels["pod"]: f.alerts for f in a.tracker.active()}
    assert linked == {j.scope["pod"]: (j.fingerprint,) for j in storm[::2]}  # vllm-N holds for even N


async def test_a_dead_replica_s_claims_are_taken_once_its_lease_lapses(
    replicas: tuple[Clock, Callable[[str], Replica]],
) -> None:
    clock, replica = replicas
    dead, survivor = replica("dead"), replica("survivor")
    storm = [job(n) for n in range(6)]
    assert len(dead.inbox.offer(storm).queued) == 6  # claimed, never worked: killed before its workers ran
    dead.database.close()
    assert survivor.inbox.requeue() == 0  # still leased
    clock.now = AT + LEASE + timedelta(seconds=1)
    assert survivor.inbox.requeue() == 6
    await survivor.inbox.start()
    await survivor.inbox.join()
    records = [survivor.memory.alert(j.key) for j in storm]
    assert {(r.outcome, r.owner, r.attempts) for r in records if r is not None} == {(Delivery.DONE, "survivor", 1)}
    assert len(survivor.diagnoser.calls) == 6


async def test_a_replica_that_lost_its_lease_can_neither_mark_nor_record(
    replicas: tuple[Clock, Callable[[str], Replica]],
) -> None:
    clock, replica = replicas
    slow, other = replica("slow"), replica("other")
    state = job(0)
    slow.inbox.offer([state])
    clock.now = AT + LEASE + timedelta(seconds=1)  # slow stalled past its lease
    assert other.inbox.requeue() == 1
    await other.inbox.start()
    await other.inbox.join()
    # What slow would write now, had it diagnosed meanwhile: refused, in the same transaction.
    assert not slow.memory.mark(state.key, Delivery.FAILED, clock.now, "late", owner="slow")
    written = slow.tracker.record(
        diagnosis(holding("vllm-0")),
        trigger=Trigger.ALERT,
        now=clock.now,
        for_=timedelta(0),
        alert="late-alert",
        claim=lambda: slow.memory.mark_within(state.key, Delivery.DONE, clock.now, None, "slow"),
    )
    assert written == []
    record = other.memory.alert(state.key)
    assert record is not None
    assert (record.outcome, record.owner, record.attempts, record.error) == (Delivery.DONE, "other", 1, None)
    [finding] = Store(other.database).active()
    assert finding.alerts == (state.fingerprint,)


async def test_two_replicas_requeueing_at_once_take_each_failed_state_once(
    replicas: tuple[Clock, Callable[[str], Replica]],
) -> None:
    clock, replica = replicas
    a, b = replica("a"), replica("b")
    failing = [job(n) for n in range(8)]
    lease = Lease("gone", AT, AT + LEASE)
    assert a.memory.claim_new([(j.key, j.as_dict()) for j in failing], lease) == {j.key for j in failing}
    for j in failing:
        assert a.memory.mark(j.key, Delivery.FAILED, AT, "Prometheus down", owner="gone")
    clock.now = AT + timedelta(seconds=31)  # past retry_after
    taken = [a.inbox.requeue(), b.inbox.requeue(), a.inbox.requeue()]
    assert sum(taken) == 8
    owners = {record.owner for j in failing if (record := a.memory.alert(j.key))}
    assert owners <= {"a", "b"}


async def test_a_resolution_on_one_replica_supersedes_the_firing_state_another_holds(
    replicas: tuple[Clock, Callable[[str], Replica]],
) -> None:
    _, replica = replicas
    holder, resolver = replica("holder"), replica("resolver")
    firing = job(0)
    holder.inbox.offer([firing])  # claimed, its diagnosis not yet recorded
    resolver.inbox.offer([job(0, status="resolved")])
    await resolver.inbox.start()
    await resolver.inbox.join()
    await holder.inbox.start()
    await holder.inbox.join()
    record = holder.memory.alert(firing.key)
    assert record is not None
    assert record.outcome == Delivery.SUPERSEDED
    assert Store(holder.database).active() == []  # the holder's diagnosis was not recorded


def test_a_sqlite_without_returning_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    database = open_database(tmp_path / "old.db")
    try:
        monkeypatch.setattr("sqlite3.sqlite_version_info", (3, 34, 1))
        monkeypatch.setattr("sqlite3.sqlite_version", "3.34.1")
        with pytest.raises(StoreError) as refused:
            DeliveryMemory(database)
    finally:
        database.close()
    assert refused.value.reason == "SQLite 3.34.1 cannot claim alerts: 3.35.0+ needed"
