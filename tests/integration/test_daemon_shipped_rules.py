"""The daemon on the shipped rules/ (all trees) against a real Prometheus: every tree runs in a
round without failing, and the fleet's full KV pool is found by the shipped queue_backlog tree."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import RULES
from tests.serving import build, fleet_prometheus, serve, settings


@pytest.fixture(scope="module")
def fleet_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fleet_prometheus(tmp_path_factory.mktemp("fleet-prometheus")) as url:
        yield url


async def test_a_round_over_the_shipped_trees(fleet_url: str, tmp_path: Path) -> None:
    catalog = [s["id"] for s in yaml.safe_load((RULES / "catalog.yaml").read_text())["symptoms"]]
    config = settings(fleet_url, tmp_path, rules_dir=str(RULES), webhook={"alertname_map": {}})
    async with serve(build(config)) as (client, services):
        listed = [s["id"] for s in (await client.get("/symptoms")).json()]
        result = await services.scheduler.run_round()
        firing = (await client.get("/findings", params={"state": "firing", "symptom": "queue_backlog"})).json()
        ready = await client.get("/readyz")
    assert listed == catalog
    assert sorted(result.trees) == sorted(catalog)
    assert "error" not in result.trees.values(), result.trees
    assert ("kv_pool_full", {"namespace": "prod", "pod": "vllm-0"}) in [
        (f["cause"], f["labels"]) for f in firing["findings"]
    ]
    assert all(f["labels"]["pod"] != "vllm-1" for f in firing["findings"])
    assert ready.json()["checks"]["rules"]["detail"] == f"{len(catalog)} trees loaded"
