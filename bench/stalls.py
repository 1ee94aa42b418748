"""Where the event loop stalls: a heartbeat task on the loop and a watcher thread that, whenever
the heartbeat is older than `over` seconds, samples what the loop's thread is running.

The samples name the innermost frames of diagnosd and of the libraries a request passes through
(the ASGI server, httpx, sqlite3, logging), so a stall reads as the call that held the loop, not as the
loop's own machinery. One sample per `every` seconds of a stall: the counts weigh how long each
call held it.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import traceback
from collections import Counter

# The frames a sample keeps, by the path of their file.
KEPT = ("diagnosd", "sqlite", "httpx", "uvicorn", "json", "logging")


class Stalls:
    def __init__(self, over: float = 0.02, every: float = 0.005, depth: int = 4, kept: tuple[str, ...] = KEPT) -> None:
        self.over, self.every, self.depth, self.kept = over, every, depth, kept
        self.samples: Counter[str] = Counter()
        self._beat = time.perf_counter()
        self._stop = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """From the loop's thread: the heartbeat on this loop, the watcher on a thread of its own."""
        self._task = asyncio.get_running_loop().create_task(self._heart())
        self._thread = threading.Thread(target=self._watch, args=(threading.get_ident(),), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
        if self._thread is not None:
            self._thread.join()

    def top(self, n: int = 10) -> list[tuple[str, int]]:
        return self.samples.most_common(n)

    async def _heart(self) -> None:
        while True:
            self._beat = time.perf_counter()
            await asyncio.sleep(0.001)

    def _watch(self, loop_thread: int) -> None:
        while not self._stop.wait(self.every):
            if time.perf_counter() - self._beat <= self.over:
                continue
            frame = sys._current_frames().get(loop_thread)
            if frame is None:
                continue
            kept = [
                f"{f.filename.rsplit('/', 1)[-1]}:{f.name}"
                for f in traceback.extract_stack(frame)
                if any(part in f.filename for part in self.kept)
            ]
            self.samples[" > ".join(kept[-self.depth :]) or "(the loop itself)"] += 1
