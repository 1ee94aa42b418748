"""What every source test starts from: no proxy and no netrc of the machine running the tests
(a test that wants one sets it)."""

from __future__ import annotations

from pathlib import Path

import pytest

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-such-netrc"))
