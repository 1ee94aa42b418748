"""`diagnosd demo --once`: the demo's steps headless, bounded in time, finding the scenario's cause."""

from __future__ import annotations

import time

import pytest

from diagnosd.cli import main


def test_the_default_demo_finds_kv_pool_full(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code = main(["demo", "--scenario", "kv_pool_full", "--once"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert time.monotonic() - started < 90
    assert "queue_backlog" in out
    assert "SYMPTOM PRESENT" in out
    assert "expected root cause kv_pool_full: found" in out
    assert "▲" in out  # the seed-style tree marks the branch that holds


def test_the_demo_lists_its_scenarios(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--list"]) == 0
    out = capsys.readouterr().out
    assert "kv_pool_full" in out
    assert "queue_backlog → kv_pool_full" in out


def test_an_unknown_scenario_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--scenario", "no_such_thing", "--once"]) == 2
    assert "known:" in capsys.readouterr().err
