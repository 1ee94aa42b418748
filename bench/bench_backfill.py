"""Benchmark: promtool's backfill of a week of history in 72 h blocks vs one block, side by side.

Run: python bench/bench_backfill.py [SERIES] [REPEATS]   (needs promtool on PATH; default 2000, 3)
promtool reads its whole input once per block it cuts, so a week in 72 h blocks is three passes;
`diagnosd.promlocal.backfill` now asks for blocks long enough to cut one. Writes SERIES series of
a week at one sample a minute in the last two hours and one an hour before (as the drills do),
then times both block lengths alternately and prints medians and their ratio.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from diagnosd.promlocal import executable
from diagnosd.promlocal.openmetrics import Series, write

END = 1_800_000_000.0
WEEK = 7 * 86400 + 3600


def history(count: int) -> list[Series]:
    hourly = [END - WEEK + h * 3600.0 for h in range(int((WEEK - 7200) // 3600))]
    dense = [END - 7200 + m * 60.0 for m in range(121)]
    stamps = hourly + dense
    labels = {"namespace": "llm-serving", "job": "vllm", "container": "vllm", "endpoint": "http"}
    return [
        Series(
            "vllm:num_requests_running",
            {**labels, "pod": f"vllm-{n // 20}", "le": str(n % 20)},
            [(t, float((n + i) % 7)) for i, t in enumerate(stamps)],
        )
        for n in range(count)
    ]


def timed(promtool: str, source: Path, hours: int, work: Path) -> float:
    out = work / f"tsdb-{hours}-{time.monotonic_ns()}"
    began = time.perf_counter()
    subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            f"--max-block-duration={hours}h",
            str(source),
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - began


def main(argv: list[str]) -> int:
    count = int(argv[0]) if argv else 2000
    repeats = int(argv[1]) if len(argv) > 1 else 3
    promtool = executable("promtool")
    with tempfile.TemporaryDirectory(prefix="diagnosd-bench-backfill-") as tmp:
        work = Path(tmp)
        source = work / "week.om"
        with source.open("w", encoding="utf-8") as out:
            samples = write(out, history(count))
        times: dict[int, list[float]] = {72: [], 192: []}
        for _ in range(repeats):
            for hours in times:
                times[hours].append(timed(promtool, source, hours, work))
        size = source.stat().st_size / 1e6
    many, one = statistics.median(times[72]), statistics.median(times[192])
    print(f"{count} series, {samples} samples, {size:.0f} MB, median of {repeats}")
    print(f"72 h blocks (3 passes): {many:.2f} s")
    print(f"one block:              {one:.2f} s")
    print(f"ratio:                  {many / one:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
