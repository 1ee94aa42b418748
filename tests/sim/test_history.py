"""`diagnosd simulate --out`: OpenMetrics that promtool backfills, continuous with the live series."""

from __future__ import annotations

import math
import time
from pathlib import Path

import httpx
import pytest

from diagnosd.cli import main
from diagnosd.promlocal import LocalPrometheus, backfill
from diagnosd.sim import scenario
from diagnosd.sim.demo import scrape_config
from diagnosd.sim.server import MetricsServer
from diagnosd.sim.simulator import Simulator


def _query(url: str, promql: str, at: float | None = None) -> list[dict[str, object]]:
    params = {"query": promql, **({"time": str(at)} if at is not None else {})}
    answer = httpx.get(f"{url}/api/v1/query", params=params, timeout=10).json()
    assert answer["status"] == "success", answer
    result: list[dict[str, object]] = answer["data"]["result"]
    return result


def _value(result: list[dict[str, object]]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])  # type: ignore[index]


def test_history_backfills_and_live_series_continue_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    anchor = float(math.floor(time.time()))
    out = tmp_path / "history.om"
    code = main(
        ["simulate", "--scenario", "healthy", "--history", "2h", "--anchor", f"{anchor:.0f}", "--out", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert f"--anchor {anchor:.0f}" in printed
    assert "create-blocks-from openmetrics" in printed
    assert out.read_text(encoding="utf-8").endswith("# EOF\n")
    backfill(out, tmp_path / "tsdb")

    # The live server a user starts with the printed command: same scenario, seed, history and anchor.
    sim = Simulator(scenario.load("healthy"), anchor=anchor, history=7200.0)
    sim.run(anchor)
    pod = sim.pods["pod/vllm-llama-8b/0"].name
    selector = f'vllm:prompt_tokens_total{{pod="{pod}"}}'
    with (
        MetricsServer(sim) as server,
        LocalPrometheus(
            tmp_path / "prom", tsdb=tmp_path / "tsdb", scrape=[scrape_config(server.port)], scrape_interval="1s"
        ) as prom,
    ):
        past = _value(_query(prom.url, f"rate({selector}[10m])", at=anchor - 1800))
        assert past > 0.0, "the backfilled history answers rate() half an hour back"
        last_backfilled = _value(_query(prom.url, selector, at=anchor))
        deadline = time.monotonic() + 25
        while server.scrapes < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.scrapes >= 3
        now = time.time()
        assert _value(_query(prom.url, f"resets({selector}[10m])", at=now)) == 0.0
        live = _value(_query(prom.url, selector, at=now))
        assert live > last_backfilled
        # The live rate continues the backfilled one (same model, same daily phase).
        assert _value(_query(prom.url, f"rate({selector}[10m])", at=now)) == pytest.approx(past, rel=0.5)
