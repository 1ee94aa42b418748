"""The states seen settled for good (settled.py): only done, rejected and superseded count, each
while its memory is younger than the refresh; a touch renews it; the least recently seen go first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from diagnosd.daemon.alertmanager.memory import AlertRecord
from diagnosd.daemon.alertmanager.settled import Settled

AT = datetime(2026, 11, 29, 14, 0, tzinfo=UTC)
REFRESH = timedelta(hours=1)


def record(n: int, outcome: str, updated: datetime = AT) -> AlertRecord:
    return AlertRecord((f"fp-{n}", "firing", "t"), outcome, 1, {}, AT, updated, None)


@pytest.mark.parametrize("outcome", ["done", "rejected", "superseded"])
def test_a_state_settled_for_good_is_known_until_its_memory_is_a_refresh_old(outcome: str) -> None:
    settled = Settled(REFRESH)
    settled.note(record(1, outcome))
    assert settled.known(record(1, outcome).key, AT + REFRESH - timedelta(seconds=1))
    assert not settled.known(record(1, outcome).key, AT + REFRESH)  # looked up and written again
    assert len(settled) == 0


@pytest.mark.parametrize("outcome", ["queued", "failed"])
def test_a_state_that_may_still_be_taken_is_never_known(outcome: str) -> None:
    # A failed state is retried when it is re-sent; a queued one may be another replica's whose
    # lease lapses: each re-send of either is looked up.
    settled = Settled(REFRESH)
    settled.note(record(1, outcome))
    assert not settled.known(record(1, outcome).key, AT)


def test_a_touch_renews_what_the_lookup_found_old() -> None:
    settled = Settled(REFRESH)
    old = record(1, "done", updated=AT - REFRESH)
    settled.note(old)
    assert not settled.known(old.key, AT)
    settled.note(old, written=AT)
    assert settled.known(old.key, AT + REFRESH / 2)


def test_the_least_recently_seen_go_first() -> None:
    settled = Settled(REFRESH, capacity=2)
    for n in (1, 2):
        settled.note(record(n, "done"))
    assert settled.known(record(1, "done").key, AT)  # seen: now the most recent
    settled.note(record(3, "done"))
    assert len(settled) == 2
    assert not settled.known(record(2, "done").key, AT)
    assert settled.known(record(1, "done").key, AT)
    assert settled.known(record(3, "done").key, AT)


def test_a_memory_is_due_for_a_write_once_it_is_a_refresh_old_whatever_its_outcome() -> None:
    settled = Settled(REFRESH)
    for outcome in ("done", "failed", "queued"):
        assert not settled.due(record(1, outcome), AT + REFRESH - timedelta(microseconds=1))
        assert settled.due(record(1, outcome), AT + REFRESH)
    assert not settled.due(None, AT + 10 * REFRESH)  # in flight here: its mark writes it
