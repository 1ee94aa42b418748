"""One real Prometheus with the fixture fleet's history for the API tests (read-only, so shared)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serving import fleet_prometheus


@pytest.fixture(scope="session")
def fleet_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fleet_prometheus(tmp_path_factory.mktemp("fleet-prometheus")) as url:
        yield url
