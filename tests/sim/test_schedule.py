"""The schedule ticks densely exactly where it is told to look, coarsely elsewhere."""

from __future__ import annotations

import itertools

from diagnosd.sim.schedule import LOOKS, Schedule

ANCHOR = 1_800_000_000.0
DAY = 86400.0


def ticks(schedule: Schedule) -> list[float]:
    out, t = [], schedule.origin
    while (t := schedule.next(t)) <= schedule.anchor:
        out.append(t)
    return out


def dense_spans(schedule: Schedule) -> list[tuple[float, float]]:
    """Runs of consecutive `step`-apart ticks, as (first, last) tick times."""
    found = ticks(schedule)
    spans: list[tuple[float, float]] = []
    for before, after in itertools.pairwise(found):
        if after - before == schedule.step:
            if spans and spans[-1][1] == before:
                spans[-1] = (spans[-1][0], after)
            else:
                spans.append((before, after))
    return spans


def test_dense_ticks_follow_the_looks() -> None:
    looks = ((0.0, 600.0), (DAY, 1200.0), (2 * DAY + 3600.0, 300.0))
    schedule = Schedule(ANCHOR - 3 * DAY, ANCHOR, looks=looks)
    assert schedule.dense == (
        (ANCHOR - 600, ANCHOR),
        (ANCHOR - DAY - 1200, ANCHOR - DAY),
        (ANCHOR - 2 * DAY - 3900, ANCHOR - 2 * DAY - 3600),
    )
    # Every minute from the start of each look to its end, every quarter of an hour elsewhere.
    spans = dense_spans(schedule)
    assert sorted(spans) == sorted(schedule.dense)
    found = ticks(schedule)
    elsewhere = [t for t in found if not any(start <= t <= end for start, end in spans)]
    assert elsewhere
    assert all((t - schedule.origin) % schedule.coarse == 0 for t in elsewhere)


def test_moving_a_look_moves_its_dense_ticks() -> None:
    a = Schedule(ANCHOR - 2 * DAY, ANCHOR, looks=((DAY, 600.0),))
    b = Schedule(ANCHOR - 2 * DAY, ANCHOR, looks=((DAY + 7200.0, 600.0),))
    assert [(s + 7200.0, e + 7200.0) for s, e in dense_spans(b)] == dense_spans(a)
    # Nowhere dense without a look: the history is all coarse up to the anchor.
    bare = Schedule(ANCHOR - DAY, ANCHOR, looks=())
    assert dense_spans(bare) == []
    assert len(ticks(bare)) == DAY / bare.coarse


def test_the_default_looks_are_the_last_hour_and_a_half_and_the_same_time_yesterday() -> None:
    schedule = Schedule(ANCHOR - 26 * 3600.0, ANCHOR)
    assert schedule.looks == LOOKS
    [yesterday, now] = sorted(schedule.dense)
    assert now == (ANCHOR - 95 * 60.0, ANCHOR)
    assert yesterday[0] < ANCHOR - DAY < yesterday[1]


def test_far_back_the_ticks_are_hourly_up_to_where_the_short_looks_need_more() -> None:
    schedule = Schedule(ANCHOR - 7 * DAY, ANCHOR, looks=((0.0, 600.0), (DAY, 600.0)), far=DAY + 3600.0)
    found = ticks(schedule)
    far = [t for t in found if t < ANCHOR - schedule.far]
    assert far == [schedule.origin + k * 3600.0 for k in range(1, len(far) + 1)]
    assert ANCHOR - schedule.far in found
    near = [t for t in found if ANCHOR - schedule.far <= t and not any(s <= t <= e for s, e in schedule.dense)]
    assert {b - a for a, b in itertools.pairwise(near)} >= {schedule.coarse}
    assert all((t - schedule.origin) % schedule.coarse == 0 for t in near)
