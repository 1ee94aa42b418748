"""The wheel, built as the image builds it and installed in a fresh virtualenv outside the checkout,
works wherever it runs: its trees, their series tests and the simulator's scenarios come with it, and
are found from a working directory with no rules/ anywhere near.

Slow (a build, an install, real Prometheus processes): part of `make test`; `-m 'not slow'` skips it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from diagnosd import __version__
from diagnosd.daemon import compose
from diagnosd.promlocal import free_port
from diagnosd.promlocal.openmetrics import Series
from tests.conftest import REPO, RULES, StartPrometheus
from tests.deploy import dockerfile

pytestmark = pytest.mark.slow

AT = datetime(2026, 2, 1, 12, tzinfo=UTC)
# What a build backend says when it finds something wrong with the project (warning classes, distutils notes).
COMPLAINT = re.compile(r"[A-Z]\w*Warning\b|^\s*warning:", re.MULTILINE)
DEPRECATION = re.compile(r"deprecat", re.IGNORECASE)


@dataclass(frozen=True)
class Built:
    wheel: Path
    output: str


@dataclass(frozen=True)
class Installed:
    venv: Path
    cwd: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "diagnosd"), *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would point diagnosd or Python back at the checkout."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAGNOSD_") and k not in dropped}
    return env | extra


def _run(argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=600)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`pip wheel --no-deps` on what the image's build stage copies, and nothing else."""
    source = tmp_path_factory.mktemp("source")
    for stage in dockerfile.stages()[:-1]:
        for copy in stage.copies():
            for name in copy.sources if copy.stage is None else ():
                origin = REPO / name.rstrip("/")
                if origin.is_dir():
                    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
                    shutil.copytree(origin, source / origin.name, ignore=ignore)
                else:
                    shutil.copy2(origin, source / origin.name)
    out = tmp_path_factory.mktemp("wheels")
    # Without PYTHONDONTWRITEBYTECODE: setuptools would say it skips byte-compiling, about this machine.
    done = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), "-v", str(source)],
        env=_clean_env(),
    )
    (wheel,) = out.glob("diagnosd-*.whl")
    return Built(wheel, done.stdout + done.stderr)


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A fresh virtualenv outside the checkout with the wheel (its dependencies from pip, as a user gets them)."""
    venv = tmp_path_factory.mktemp("venv")
    cwd = tmp_path_factory.mktemp("elsewhere")
    for path in (venv, cwd):
        assert not path.resolve().is_relative_to(REPO.resolve()), f"{path} is inside the checkout"
    assert not any((parent / "rules").exists() for parent in (cwd, *cwd.parents)), "a rules/ above the test's directory"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(built.wheel)], env=_clean_env()
    )
    # prometheus and promtool stay on PATH: `rules test` and `demo` start them.
    return Installed(venv, cwd, _clean_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"))


def _shipped_names() -> set[str]:
    return {path.name for path in RULES.glob("*.yaml")}


def test_the_build_says_nothing_is_deprecated(built: Built) -> None:
    assert DEPRECATION.search(built.output) is None, built.output
    complaints = [line for line in built.output.splitlines() if COMPLAINT.search(line)]
    assert complaints == [], "\n".join(complaints)


def test_the_wheel_holds_the_trees_their_tests_and_the_scenarios(built: Built) -> None:
    with zipfile.ZipFile(built.wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"diagnosd-{__version__}.dist-info/METADATA").decode()
    shipped = _shipped_names()
    assert {"catalog.yaml", "metrics.yaml", "ttft_high.yaml", "ttft_high.test.yaml"} <= shipped
    assert {f"diagnosd/rules/{name}" for name in shipped} <= names
    scenarios = {p.name for p in (REPO / "diagnosd" / "sim" / "scenarios").glob("*.yaml")}
    assert scenarios
    assert {f"diagnosd/sim/scenarios/{name}" for name in scenarios} <= names
    assert not [n for n in names if n.startswith(("rules/", "tests/", "share/")) or "__pycache__" in n]
    assert f"\nVersion: {__version__}\n" in metadata
    assert "\nLicense-Expression: Apache-2.0\n" in metadata


def test_version(installed: Installed) -> None:
    done = installed.run("--version")
    assert (done.returncode, done.stdout) == (0, f"diagnosd {__version__}\n"), done.stderr


def test_symptoms_lists_every_shipped_tree(installed: Installed) -> None:
    expected = list(compose.load(RULES).ruleset.trees)
    assert len(expected) == 20
    done = installed.run("symptoms", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert [row["id"] for row in json.loads(done.stdout)] == expected
    text = installed.run("symptoms")
    assert text.returncode == 0, text.stderr
    assert [line.split()[0] for line in text.stdout.splitlines()] == expected


def test_rules_validate_without_a_directory_reads_the_installed_trees(installed: Installed) -> None:
    done = installed.run("rules", "validate")
    assert done.returncode == 0, done.stderr
    directory, _, verdict = done.stdout.strip().rpartition(": ")
    assert verdict == "20 trees valid"
    assert Path(directory).is_relative_to(installed.venv), directory
    assert Path(directory).name == "rules"


def test_rules_test_runs_the_installed_series_tests_on_a_real_prometheus(installed: Installed) -> None:
    done = installed.run("rules", "test", "--only", "queue_backlog", "--only", "kv_hit_low", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    passed = re.fullmatch(r"rules test: (\d+) passed, 0 failed", last)
    assert passed is not None, done.stdout
    assert int(passed.group(1)) >= 2
    trees = {line.split()[1].rstrip(":") for line in done.stdout.splitlines() if line.startswith("ok ")}
    assert trees == {"queue_backlog", "kv_hit_low"}


def _flat(name: str, labels: dict[str, str], value: float) -> Series:
    """An hour of samples up to AT, one a minute."""
    return Series(name, labels, [((AT - timedelta(minutes=m)).timestamp(), value) for m in range(60, -1, -1)])


def test_diagnose_against_a_real_prometheus(installed: Installed, start_prometheus: StartPrometheus) -> None:
    labels = {"namespace": "prod", "pod": "vllm-0", "model_name": "llama"}
    prom = start_prometheus(
        [_flat("vllm:num_requests_waiting", labels, 25), _flat("vllm:kv_cache_usage_perc", labels, 0.97)]
    )
    argv = ("diagnose", "queue_backlog", "--prometheus", prom.url, "--at", AT.isoformat())
    done = installed.run(*argv, "--format", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    (target,) = json.loads(done.stdout)["targets"]
    assert target["labels"] == {"namespace": "prod", "pod": "vllm-0"}
    assert target["symptom_present"] is True
    assert target["detect"]["value"] == 25
    cause = target["root_causes"][0]
    assert cause["cause"] == "kv_pool_full"
    (evidence,) = cause["evidence"]  # the check evaluated to data: the backfilled 0.97 against 0.9
    assert (evidence["value"], evidence["threshold"]) == (pytest.approx(0.97), 0.9)
    assert "vllm:kv_cache_usage_perc" in evidence["query"]
    text = installed.run(*argv)
    assert text.returncode == 0, text.stdout + text.stderr
    assert "kv_pool_full" in text.stdout


def test_diagnose_exits_3_when_prometheus_cannot_be_reached(installed: Installed) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done = installed.run("diagnose", "ttft_high", "--prometheus", url, "--timeout", "2")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Prometheus could not be" in done.stderr
    assert "Traceback" not in done.stderr


def test_demo_once_runs_from_the_installed_wheel(installed: Installed) -> None:
    """The scenarios ship with the wheel; an hour of history (not the default day) keeps this under 20 s."""
    done = installed.run("demo", "--once", "--history", "1h", timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "expected root cause kv_pool_full: found" in done.stdout
    assert "Traceback" not in done.stderr
