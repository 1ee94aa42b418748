"""Two trackers on one store, as two replicas have (each backend, each its own connection): each
update reads what the other wrote under the findings turn, so a finding both record at once is one
episode; `reload` gives a replica taking over what the other left; expiry never deletes a target
state the other refreshed."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from diagnosd.findings.lifecycle import Trigger
from diagnosd.findings.store import Store
from diagnosd.findings.tracker import Tracker
from tests.findings.builders import AT, clear, diagnosis, holding

PODS = 12


@pytest.fixture
def stores(database_location: Path | str) -> Iterator[Callable[[], Store]]:
    """store(): a store on a connection of its own to the one database."""
    opened: list[Store] = []

    def store() -> Store:
        opened.append(Store.open(database_location))
        return opened[-1]

    yield store
    for s in opened:
        s.close()


def alert_of(tracker: Tracker, pod: str, alert: str, minutes: int = 0) -> None:
    at = AT + timedelta(minutes=minutes)
    tracker.record(
        replace(diagnosis(holding(pod)), evaluated_at=at),
        trigger=Trigger.ALERT,
        now=AT + timedelta(minutes=minutes),
        for_=timedelta(0),
        alert=alert,
    )


def test_two_replicas_recording_one_finding_at_once_write_one_episode(database_location: Path | str) -> None:
    both = threading.Barrier(2)
    errors: list[BaseException] = []

    def replica(name: str, minutes: int) -> None:
        store = Store.open(database_location)  # in its thread: a SQLite connection stays in its own
        try:
            tracker = Tracker(store)
            for n in range(PODS):
                both.wait(timeout=30)  # each pod recorded by both as close together as threads go
                alert_of(tracker, f"vllm-{n}", f"{name}-{n}", minutes)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)
            both.abort()
        finally:
            store.close()

    Store.open(database_location).close()  # migrated once, before the race
    # Different moments: an episode each would have a key each, so a duplicate could not hide.
    threads = [threading.Thread(target=replica, args=(name, m)) for name, m in (("a", 0), ("b", 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    store = Store.open(database_location)
    active = store.active()
    assert len(active) == PODS
    for f in active:
        n = f.labels["pod"].split("-")[1]
        assert sorted(f.alerts) == [f"a-{n}", f"b-{n}"]
        assert len(store.episodes(f.fingerprint)) == 1
    store.close()


def test_reload_reads_what_another_replica_wrote(stores: Callable[[], Store]) -> None:
    writer, standby = Tracker(stores()), Tracker(stores())
    alert_of(writer, "vllm-0", "fp-0")
    assert standby.active() == []  # its view is from its start
    standby.reload()
    assert [f.alerts for f in standby.active()] == [("fp-0",)]
    assert [s.labels["pod"] for s in standby.states(AT, timedelta(minutes=10))] == ["vllm-0"]


def test_a_stale_view_never_starts_a_second_episode_or_misses_a_resolution(stores: Callable[[], Store]) -> None:
    writer, stale = Tracker(stores()), Tracker(stores())
    alert_of(writer, "vllm-0", "fp-0")
    alert_of(stale, "vllm-0", "fp-1", minutes=1)  # it never saw fp-0's finding: read under the turn
    store = stores()
    [finding] = store.active()
    assert finding.alerts == ("fp-0", "fp-1")
    assert len(store.episodes(finding.fingerprint)) == 1
    stale.record(diagnosis(clear("vllm-0")), trigger=Trigger.ROUND, now=AT + timedelta(minutes=2), for_=timedelta(0))
    writer.resolve_alert("fp-0", AT + timedelta(minutes=3))  # resolved already: nothing left to resolve
    assert store.active() == []
    assert [e.state for e in store.episodes(finding.fingerprint)] == ["resolved"]


def test_expiry_keeps_a_target_state_the_other_replica_refreshed(stores: Callable[[], Store]) -> None:
    old, fresh = Tracker(stores()), Tracker(stores())
    alert_of(old, "vllm-0", "fp-0")
    alert_of(fresh, "vllm-0", "fp-0", minutes=9)  # a round on the other replica saw it again
    ttl = timedelta(minutes=5)
    assert old.expire(AT + timedelta(minutes=10), ttl) == 0  # by the row's time, not by old's memory
    assert old.states(AT + timedelta(minutes=10), ttl) == []
    fresh.reload()
    assert len(fresh.states(AT + timedelta(minutes=10), ttl)) == 1
