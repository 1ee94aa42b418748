"""The composition root's process-wide settings while the daemon is up, undone when it stops."""

from __future__ import annotations

import gc
from pathlib import Path

from diagnosd.daemon import compose
from tests.serving import build, settings


async def test_the_heap_alive_at_startup_is_left_out_of_collections_until_it_stops(tmp_path: Path) -> None:
    before = gc.get_threshold()
    async with compose.open_services(build(settings("http://127.0.0.1:9", tmp_path))):
        # The startup heap (trees, settings, pydantic validators) frozen, the young generation
        # larger: a fleet's diagnosis no longer pays a walk of every validator per collection.
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == compose.YOUNG_THRESHOLD > before[0]
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before
