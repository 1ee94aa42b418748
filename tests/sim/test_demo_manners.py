"""`diagnosd demo`: the healthy scenarios, an aligned --list, and no temporary directory left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from diagnosd.cli import main
from diagnosd.sim import demo, scenario
from tests.conftest import REPO

PREFIX = "diagnosd-demo-"


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the demo's temporary directory goes, to see that it is gone afterwards."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _left(temp: Path) -> list[Path]:
    return sorted(temp.glob(f"{PREFIX}*"))


def test_list_columns_stay_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(scenario.names())
    names = {line.split()[0] for line in lines}
    assert names == set(scenario.names())
    width = max(len(name) for name in names)
    titles = {len(line) - len(line[width:].lstrip()) for line in lines}
    assert titles == {width + 2}, "titles start in one column"
    brackets = {line.index("  [") for line in lines}
    assert len(brackets) == 1, "the symptom → cause column starts in one column"
    assert any("healthy" in line and "[no cause expected]" in line for line in lines)


def test_simulate_list_is_aligned_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    width = max(len(line.split()[0]) for line in lines)
    assert {len(line) - len(line[width:].lstrip()) for line in lines} == {width + 2}


def test_the_healthy_demo_reports_what_it_found(temp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["demo", "--scenario", "healthy", "--once"])
    out = capsys.readouterr().out
    assert "cannot be used" not in out
    assert out.count("no symptom on") + out.count("SYMPTOM PRESENT on") == 20  # every symptom was asked
    if code == 0:
        assert "no cause expected, none found" in out
    else:  # honestly: what showed although nothing should
        assert code == 1, out
        assert "no cause expected, but found:" in out
    assert _left(temp) == []  # the normal way out cleans up


@pytest.mark.parametrize(
    ("raised", "code", "said"),
    [
        (RuntimeError("promtool failed: no space left"), 2, "promtool failed"),
        (KeyboardInterrupt(), 130, "interrupted"),
    ],
)
def test_the_temporary_directory_goes_on_every_exit(
    temp: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raised: BaseException,
    code: int,
    said: str,
) -> None:
    seen: list[Path] = []

    def failing_backfill(source: Path, tsdb: Path) -> None:
        seen.append(source.parent)
        assert source.exists()  # the history was written into the temporary directory
        raise raised

    monkeypatch.setattr(demo, "backfill", failing_backfill)
    assert main(["demo", "--scenario", "kv_pool_full", "--once", "--history", "1h"]) == code
    assert said in capsys.readouterr().err
    assert [path.name[: len(PREFIX)] for path in seen] == [PREFIX]
    assert _left(temp) == []


def test_an_unexpected_error_still_removes_it(temp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error the command line does not expect propagates, and the directory is still gone."""

    def broken(source: Path, tsdb: Path) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(demo, "backfill", broken)
    with pytest.raises(ZeroDivisionError):
        main(["demo", "--scenario", "kv_pool_full", "--once", "--history", "1h"])
    assert _left(temp) == []


@pytest.mark.parametrize("after", ["1/6", "Press Ctrl-C"], ids=["while-starting", "while-waiting"])
def test_sigterm_stops_everything_and_cleans_up(tmp_path: Path, after: str) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "diagnosd", "demo", "--scenario", "kv_pool_full", "--history", "1h"]
    with subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        assert p.stdout is not None
        deadline = time.monotonic() + 120
        for line in p.stdout:
            if after in line or time.monotonic() > deadline:
                break
        assert _left(tmp_path), "the demo works in a temporary directory"
        p.send_signal(signal.SIGTERM)
        rest = p.stdout.read()
        code = p.wait(timeout=60)
    assert code in (0, 1, 130), rest
    assert "Traceback" not in rest
    assert _left(tmp_path) == []
