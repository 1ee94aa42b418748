"""Schemathesis against the in-process app (a real Prometheus behind it, auth on): every operation
of the OpenAPI schema, every phase (examples, coverage, fuzzing, stateful), every check but response
time. Declared responses must be what is returned (status, content type, body, headers), nothing
answers 5xx, what the schema allows is accepted and what it does not is refused.

The seed is fixed and generation deterministic, so CI sees the same cases each run (599 at 15
examples an operation, in well under a minute). More: DIAGNOSD_FUZZ_EXAMPLES=1000 (12 559 cases,
about 6 minutes), and another DIAGNOSD_FUZZ_SEED for other cases.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from schemathesis.engine import events, from_schema
from schemathesis.engine.statistic import Statistic
from schemathesis.python.asgi import shutdown_lifespans

from diagnosd.api import create_app
from tests.serving import HOOK_TOKEN, TOKEN, build, sample, serve, settings

EXAMPLES = int(os.environ.get("DIAGNOSD_FUZZ_EXAMPLES", "15"))
SEED = int(os.environ.get("DIAGNOSD_FUZZ_SEED", "20261201"))
WEBHOOK = "/webhook/alertmanager"


def fuzz_config(examples: int, seed: int) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": seed,
            "headers": {"Authorization": f"Bearer {TOKEN}"},
            # The webhook has its own credential (Alertmanager's http_config).
            "operations": [{"include-path": WEBHOOK, "headers": {"Authorization": f"Bearer {HOOK_TOKEN}"}}],
            # No example database: the same cases every run, none replayed from an earlier one.
            "generation": {"max-examples": examples, "deterministic": True, "mode": "all", "database": "none"},
            # Every check. max_response_time stays off without a limit: that would be a timed
            # assertion (bench/ measures speed).
            "checks": {"enabled": True},
            "phases": {"enabled": True},
        }
    )


@dataclass
class Run:
    statistic: Statistic = field(default_factory=Statistic)
    errors: list[str] = field(default_factory=list)
    operations: set[str] = field(default_factory=set)
    stop: str = ""

    def report(self) -> str:
        lines = [f"{self.statistic.total_cases} cases over {len(self.operations)} operations, stop: {self.stop}"]
        for label, grouped in sorted(self.statistic.failures.items()):
            for group in grouped.values():
                answer = group.response
                seen = f"{answer.status_code} {answer.content[:300]!r}" if answer is not None else "no response"
                for failure in group.failures:
                    lines.append(f"{label}: {failure.title}: {failure.message}\n  {group.code_sample}\n  -> {seen}")
        lines.extend(self.errors)
        return "\n".join(lines)


def execute(schema: Any) -> Run:
    run = Run()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            run.operations.add(event.recorder.label)
            run.statistic.on_scenario_finished(event.recorder)
        elif isinstance(event, events.NonFatalError):
            run.errors.append(f"{event.label}: {event.info.title}: {event.info.message}")
        elif isinstance(event, events.FatalError):
            run.errors.append(f"fatal: {event.exception!r}")
        elif isinstance(event, events.EngineFinished):
            run.stop = str(event.stop_reason)
    return run


@pytest.fixture
def schema(fleet_url: str, tmp_path: Path) -> Iterator[Any]:
    auth = {"api_tokens": [TOKEN], "webhook_tokens": [HOOK_TOKEN]}
    app = create_app(build(settings(fleet_url, tmp_path, auth=auth)))
    # Loading the schema starts the app's lifespan in schemathesis' own event loop thread.
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", app, config=fuzz_config(EXAMPLES, SEED))
    finally:
        shutdown_lifespans()


@pytest.mark.slow
# Hypothesis warns when it would print a multi-megabyte body (a deeply nested webhook delivery); that
# says nothing of the API, and pytest's warnings-as-errors would make it a failed case.
@pytest.mark.filterwarnings("ignore:Generating overly large repr")
def test_every_operation_keeps_its_schema_under_fuzzing(schema: Any) -> None:
    declared = {f"{method.upper()} {path}" for path, ops in schema.raw_schema["paths"].items() for method in ops}
    run = execute(schema)
    print(run.report())
    assert run.stop == "completed", run.report()
    assert declared <= run.operations, run.report()  # and "Stateful tests", the linked sequences
    assert run.statistic.total_cases >= len(declared) * 10, run.report()
    assert not run.statistic.failures, run.report()
    assert not run.errors, run.report()


# What fuzzing found, kept as plain cases.


async def test_repeated_label_filters_must_all_hold(fleet_url: str, tmp_path: Path) -> None:
    """The schema allows `label` repeated with one name: two values match nothing (200, empty),
    one value twice is that filter; never a 400 for a request the schema allows."""
    async with serve(build(settings(fleet_url, tmp_path))) as (client, services):
        await services.scheduler.run_round()

        async def pods(*filters: str) -> tuple[int, list[str]]:
            response = await client.get("/findings", params=[("label", f) for f in filters])
            return response.status_code, sorted(f["labels"]["pod"] for f in response.json()["findings"])

        once = await pods("pod=vllm-0")
        twice = await pods("pod=vllm-0", "pod=vllm-0")
        both = await pods("pod=vllm-0", "pod=vllm-2")
    assert once == twice == (200, ["vllm-0"])
    assert both == (200, [])


@pytest.mark.parametrize(("count", "status"), [(True, 422), ("5", 422), (5.5, 422), (5.0, 202), (5, 202)])
async def test_truncated_alerts_is_a_json_integer(fleet_url: str, tmp_path: Path, count: object, status: int) -> None:
    body = sample("webhook-received.json") | {"truncatedAlerts": count}
    async with serve(build(settings(fleet_url, tmp_path))) as (client, services):
        response = await client.post(WEBHOOK, json=body)
        await services.inbox.join()
    assert response.status_code == status, response.text
    if status == 202:
        assert response.json()["truncated_alerts"] == 5
    else:
        assert response.json()["problems"][0]["loc"] == ["body", "truncatedAlerts"]


@pytest.mark.parametrize(
    ("field", "moment"),
    [
        ("startsAt", "0001-01-01T00:00:00+01:00"),
        ("startsAt", "9999-12-31T23:59:59-01:00"),
        ("endsAt", "0001-01-01T00:00:00+01:00"),
    ],
)
async def test_a_time_utc_cannot_hold_is_taken_not_a_500(
    fleet_url: str, tmp_path: Path, field: str, moment: str
) -> None:
    """Valid RFC 3339, but before year 1 or after 9999 in UTC: converting it raised OverflowError."""
    body = sample("webhook-received.json")
    body["alerts"][0][field] = moment
    async with serve(build(settings(fleet_url, tmp_path))) as (client, services):
        response = await client.post(WEBHOOK, json=body)
        await services.inbox.join()
    assert response.status_code == 202, response.text
    assert response.json()["queued"] == 1


async def test_the_schema_says_the_payload_version_and_who_may_call(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        spec = (await client.get("/openapi.json")).json()
    payload = spec["components"]["schemas"]["Payload"]["properties"]["version"]
    assert payload["const"] == "4"
    guarded = {path for path in spec["paths"] if not path.startswith(("/healthz", "/readyz", "/webhook"))}
    for path in guarded:
        for operation in spec["paths"][path].values():
            assert "401" in operation["responses"], path
