"""The storm bench's stall sampler (bench/stalls.py): a call that holds the event loop is named,
one that lets it turn is not."""

from __future__ import annotations

import asyncio
import time
from types import ModuleType

import pytest

from tests.bench.conftest import Bench


@pytest.fixture
def stalls(bench: Bench) -> ModuleType:
    return bench("stalls")


def hold_the_loop() -> None:
    time.sleep(0.2)


async def share_the_loop() -> None:
    for _ in range(40):
        await asyncio.sleep(0.005)


async def test_the_call_that_held_the_loop_is_named_and_the_one_that_shared_it_is_not(stalls: ModuleType) -> None:
    sampler = stalls.Stalls(kept=("test_stalls",))
    sampler.start()
    try:
        await asyncio.sleep(0.01)
        await share_the_loop()
        hold_the_loop()
        await asyncio.sleep(0.01)
    finally:
        sampler.stop()
    held = dict(sampler.top())
    assert any("hold_the_loop" in where for where in held), held
    assert sum(n for where, n in held.items() if "hold_the_loop" in where) >= 10  # 200 ms, a sample per 5 ms
    assert not any("share_the_loop" in where for where in held), held
