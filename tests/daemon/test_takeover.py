"""Two replicas on one PostgreSQL, in one process (each its own session): only the one running the
rounds exports findings, the standby exports none of its stale view; when the leader's session dies
the standby takes over from what it left (the tracker read again) before running any round itself."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from pydantic import SecretStr

from diagnosd.daemon.settings.model import StoreSettings
from tests.postgres import LocalPostgres
from tests.serving import build, fleet_prometheus, serve, settings

ROOT_CAUSE = re.compile(r'^diagnosd_root_cause\{.*pod="(vllm-\d)".*\} 1\.0$', re.MULTILINE)


@pytest.fixture(scope="module")
def fleet_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fleet_prometheus(tmp_path_factory.mktemp("fleet-prometheus")) as url:
        yield url


async def test_the_leader_exports_and_a_standby_takes_over_from_what_it_left(
    fleet_url: str, tmp_path: Path, postgres_url: str, postgres_server: LocalPostgres
) -> None:
    config = settings(fleet_url, tmp_path).model_copy(update={"store": StoreSettings(url=SecretStr(postgres_url))})
    async with AsyncExitStack() as stack:
        leader_client, leader = await stack.enter_async_context(serve(build(config)))
        standby_client, standby = await stack.enter_async_context(serve(build(config)))
        assert (leader.scheduler.leading(), standby.scheduler.leading()) == (True, False)
        assert await leader.scheduler.scheduled_round() is not None
        exported = ROOT_CAUSE.findall((await leader_client.get("/metrics")).text)
        assert sorted(exported) == ["vllm-0", "vllm-1"]
        # The standby's view is from its start (no finding): it exports nothing rather than that.
        assert standby.tracker.active() == []
        assert ROOT_CAUSE.findall((await standby_client.get("/metrics")).text) == []
        [(pid,)] = leader.store.database.rows("SELECT pg_backend_pid()")
        postgres_server.admin(f"SELECT pg_terminate_backend({int(pid)}, 10000)")
        assert standby.scheduler.leads()  # the leader's session is gone: its lock with it
        # Taken over before any round of its own: the findings the leader left, exported here now.
        assert sorted(f.labels["pod"] for f in standby.tracker.active()) == ["vllm-0", "vllm-1"]
        assert sorted(ROOT_CAUSE.findall((await standby_client.get("/metrics")).text)) == ["vllm-0", "vllm-1"]
        assert await standby.scheduler.scheduled_round() is not None
        assert not leader.scheduler.leads()  # back on a new session: the standby now
        assert ROOT_CAUSE.findall((await leader_client.get("/metrics")).text) == []
