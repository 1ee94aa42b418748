"""A diagnosis through a Prometheus URL that carries credentials: they are used, never printed."""

from __future__ import annotations

import json

import pytest

from diagnosd.cli import main
from tests.serving import AT, RULES

SECRET = "s3cret-Pa55"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_diagnosis_never_shows_the_password(fleet_url: str, fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    url = fleet_url.replace("http://", f"http://admin:{SECRET}@")
    argv = ["--rules", str(RULES), "diagnose", "queue_backlog", "--prometheus", url, "--at", AT.isoformat()]
    assert main([*argv, "--format", fmt]) == 0
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err
    if fmt == "json":
        assert json.loads(captured.out)["symptom"] == "queue_backlog"
    else:
        assert "kv_pool_full" in captured.out
