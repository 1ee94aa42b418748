"""An alert whose queries Prometheus refuses (a 4xx: a bad query, not an unwell Prometheus) is
recorded as rejected with the reason at once and never retried: a retry would fail the same way.
The daemon runs in-process; the refusal is a respx fault where Prometheus would listen."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import httpx

from diagnosd.daemon.alertmanager.inbox import Delivery
from diagnosd.promlocal import free_port
from tests.fakes.prometheus import api_error, in_front_of
from tests.serving import AT, build, sample, serve, settings


class Refusing:
    """Every request refused as a bad query, counted."""

    def __init__(self) -> None:
        self.seen = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen += 1
        return api_error(400, "bad_data", 'invalid parameter "query": 1:9: parse error: unexpected character')


async def test_a_refused_query_fails_the_alert_at_once_and_is_not_retried(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there: the fault answers every request
    refusing, now = Refusing(), [AT]
    config = settings(url, tmp_path, webhook={"retry_after": "1s", "max_attempts": 5})
    async with in_front_of(url, refusing), serve(build(config, clock=lambda: now[0])) as (client, services):
        delivery = sample("webhook-received.json")
        await client.post("/webhook/alertmanager", json=delivery)
        await services.inbox.join()
        sent = refusing.seen
        now[0] = AT + timedelta(hours=1)  # far past every retry's backoff
        requeued = services.inbox.requeue()
        again = await client.post("/webhook/alertmanager", json=delivery)  # Alertmanager re-sends it
        await services.inbox.join()
        [record] = services.memory.alerts_by_outcome(Delivery.REJECTED)
        failed = services.memory.alerts_by_outcome(Delivery.FAILED)
        circuit = services.source.circuit.status()
    assert sent > 0
    assert refusing.seen == sent  # asked once: neither the retry pass nor the re-send asked again
    assert requeued == 0
    assert again.json()["duplicates"] == 1
    assert failed == []
    assert record.key[0] == "0d6ac019b0dad439"
    assert "HTTP 400 bad_data" in (record.error or "")
    assert circuit.state == "closed"  # a bad query says nothing of Prometheus' health
