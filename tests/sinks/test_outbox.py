"""The push sinks' queue (newest word per finding, bounded, drops counted), their backoff, and their
running part (client and tasks, stopped together)."""

from __future__ import annotations

import asyncio
from collections import Counter

from diagnosd.sinks.outbox import Backoff, Outbox, Running


def outbox(capacity: int) -> tuple[Outbox[str], Counter[str]]:
    dropped: Counter[str] = Counter()

    def count(outcome: str, n: int) -> None:
        dropped[outcome] += n

    return Outbox[str](capacity, count), dropped


def test_a_finding_put_again_replaces_what_waited_for_it_and_goes_last() -> None:
    box, _ = outbox(10)
    box.put("a", "a firing")
    box.put("b", "b firing")
    box.put("a", "a resolved")
    assert box.take(10) == [("b", "b firing"), ("a", "a resolved")]
    assert len(box) == 0


def test_a_full_queue_drops_its_oldest_and_counts_it() -> None:
    box, counted = outbox(2)
    for key in "abc":
        box.put(key, key)
    assert box.take(10) == [("b", "b"), ("c", "c")]
    assert counted == {"dropped": 1}


def test_failed_items_go_back_in_front_unless_something_newer_came() -> None:
    box, counted = outbox(3)
    box.put("a", "a firing")
    box.put("b", "b firing")
    failed = box.take(2)
    box.put("c", "c firing")
    box.put("a", "a resolved")
    box.restore(failed)
    assert box.take(10) == [("b", "b firing"), ("c", "c firing"), ("a", "a resolved")]
    assert counted == {}


def test_restoring_into_a_full_queue_drops_the_oldest() -> None:
    box, counted = outbox(2)
    box.put("a", "a")
    failed = box.take(1)
    box.put("b", "b")
    box.put("c", "c")
    box.restore(failed)
    assert box.take(10) == [("b", "b"), ("c", "c")]
    assert counted == {"dropped": 1}


def test_backoff_doubles_up_to_its_cap_and_starts_over_after_a_success() -> None:
    backoff = Backoff(1, 5)
    assert [backoff.next() for _ in range(5)] == [1, 2, 4, 5, 5]
    backoff.reset()
    assert backoff.next() == 1


async def test_closing_cancels_every_task_then_closes_the_client_and_a_second_close_is_a_no_op() -> None:
    running = Running()
    running.open(5.0, "t0ken")
    client = running.client
    assert client.headers["Authorization"] == "Bearer t0ken"
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    running.spawn(forever())
    await started.wait()
    (task,) = running._tasks
    await running.close()
    assert task.cancelled()
    assert client.is_closed
    await running.close()


async def test_without_a_token_no_authorization_header_is_sent() -> None:
    running = Running()
    running.open(5.0, None)
    assert "Authorization" not in running.client.headers
    await running.close()
