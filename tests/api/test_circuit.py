"""The daemon against a Prometheus that answers 429 with `Retry-After: 30` for a stretch of rounds,
requests and readiness probes (respx in front of a real Prometheus, which answers again once the
throttling ends): Prometheus sees a bounded number of requests, /readyz and the metric show the
circuit open, and once the fake recovers and the cool-down passes one probe closes it. The
circuit's clock is injected: the stretch is counted in rounds, never waited out."""

from __future__ import annotations

from pathlib import Path

import httpx

from diagnosd.daemon.compose import Services
from tests.fakes.prometheus import api_error, in_front_of
from tests.serving import AT, build, serve, settings

RETRY_AFTER = 30
STEP = 3.0  # seconds of the circuit's clock between rounds
ROUNDS = 32  # 96 s: the length of the probe that measured 242 requests without a circuit


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Throttle:
    """429 + Retry-After for every request while `on`, counting them; then the real Prometheus."""

    def __init__(self) -> None:
        self.on = True
        self.seen = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response | None:
        if not self.on:
            return None
        self.seen += 1
        response = api_error(429, "unavailable", "too many requests")
        response.headers["Retry-After"] = str(RETRY_AFTER)
        return response


def gauge(metrics_text: str) -> str:
    [line] = [line for line in metrics_text.splitlines() if line.startswith("diagnosd_prometheus_circuit_state ")]
    return line.split()[1]


async def stretch(client: httpx.AsyncClient, services: Services, ticks: Ticks) -> list[int]:
    """Every step: a scheduler round, a REST diagnosis and a readiness probe; the statuses of the
    diagnoses."""
    statuses = []
    for _ in range(ROUNDS):
        await services.scheduler.run_round()
        diagnosis = await client.get("/diagnose/queue_backlog", params={"at": AT.isoformat()})
        statuses.append(diagnosis.status_code)
        await client.get("/readyz")
        ticks.now += STEP
    return statuses


async def test_a_throttling_prometheus_is_left_alone_then_probed_back(fleet_url: str, tmp_path: Path) -> None:
    ticks, throttle = Ticks(), Throttle()
    config = settings(fleet_url, tmp_path, prometheus={"url": fleet_url, "retries": 2})
    built = build(config, timer=ticks, rand=lambda: 0.0)
    async with in_front_of(fleet_url, throttle), serve(built) as (client, services):
        statuses = await stretch(client, services, ticks)
        ready = await client.get("/readyz")
        open_metrics = (await client.get("/metrics")).text
        refused = await client.get("/diagnose/queue_backlog", params={"at": AT.isoformat()})
        seen = throttle.seen

        throttle.on = False  # Prometheus recovers; nothing asks it until the cool-down has passed
        wait = ready.json()["checks"]["prometheus"]["circuit"]["next_probe_in_seconds"]
        ticks.now += wait
        probed = await client.get("/readyz")
        closed_metrics = (await client.get("/metrics")).text
        answered = await client.get("/diagnose/queue_backlog", params={"at": AT.isoformat()})

    # 32 rounds, diagnoses and readiness probes over 96 s: the first round's calls in flight when the
    # first 429 came, then one probe per Retry-After (30 s, 60 s, 90 s). Without the circuit: 242.
    print(f"requests Prometheus saw in the stretch: {seen}")
    assert seen <= 10, seen
    assert set(statuses) == {503}
    assert ready.status_code == 503
    prometheus = ready.json()["checks"]["prometheus"]
    assert prometheus["ok"] is False
    circuit = prometheus["circuit"]
    assert circuit["state"] == "open"
    assert circuit["failures"] >= 1
    # Openings at 0, 30, 60 s (each for the Retry-After, longer than the 5, 10, 20 s backoff) and at
    # 90 s for the 40 s backoff, which has outgrown it: the next probe at 130 s, 34 s after the stretch.
    assert circuit["openings"] == 4
    assert circuit["next_probe_in_seconds"] == 130 - ROUNDS * STEP
    assert "Retry-After" not in circuit["last_error"]  # the header's meaning, in words:
    assert "Prometheus asked to be called again in 30s" in circuit["last_error"]
    assert gauge(open_metrics) == "2.0"
    assert "diagnosd_prometheus_circuit_opened_total 4.0" in open_metrics  # at 0 s, then each failed probe
    body = refused.json()
    assert (refused.status_code, body["error"]) == (503, "prometheus_unavailable")
    assert "circuit open after" in body["message"]

    assert probed.status_code == 200
    assert probed.json()["checks"]["prometheus"]["circuit"]["state"] == "closed"
    assert gauge(closed_metrics) == "0.0"
    assert answered.status_code == 200
    assert answered.json()["targets"]
