"""Hostile and odd input at the API's edge: scope values Prometheus's lexer refuses, bytes that are not
UTF-8, a label without a value, Starlette's own refusals, and the OpenAPI patterns that say which
`at` / `label` values are taken (checked against what the code takes)."""

from __future__ import annotations

import re
from datetime import date, timedelta
from pathlib import Path

import pytest

from diagnosd.api.deps import LABEL_FILTER_PATTERN, MOMENT_PATTERN
from diagnosd.moments import parse_moment
from tests.conftest import StartPrometheus
from tests.serving import AT, build, counted, fleet, sample, serve, settings

# U+FFFD is valid UTF-8, but Prometheus's lexer reads it as utf8.RuneError: "invalid UTF-8 rune".
ODD = "pr\ufffdod"


async def test_a_replacement_character_in_a_scope_value_reaches_prometheus(
    start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    prom = start_prometheus(fleet(ODD))
    async with serve(build(settings(prom.url, tmp_path))) as (client, _):
        # Sent as its UTF-8 bytes, percent-encoded, as `?namespace=pr%EF%BF%BDod`.
        response = await client.get("/diagnose/queue_backlog", params={"namespace": ODD, "at": AT.isoformat()})
    assert response.status_code == 200, response.text
    targets = {t["labels"]["pod"]: t for t in response.json()["targets"]}
    assert sorted(targets) == ["vllm-0", "vllm-1", "vllm-2"]
    assert {t["labels"]["namespace"] for t in targets.values()} == {ODD}
    assert [c["cause"] for c in targets["vllm-0"]["root_causes"]] == ["kv_pool_full"]


async def test_an_alert_with_a_replacement_character_is_diagnosed_once(
    start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    prom = start_prometheus(fleet(ODD))
    body = sample("webhook-received.json")
    body["alerts"][0]["labels"]["namespace"] = ODD
    async with serve(build(settings(prom.url, tmp_path))) as (client, services):
        response = await client.post("/webhook/alertmanager", json=body)
        await services.inbox.join()
        findings = (await client.get("/findings")).json()["findings"]
        failed = services.memory.alerts_by_outcome("failed")
        ok = counted(services.metrics.diagnoses, trigger="alert", outcome="ok")
    assert response.status_code == 202
    assert failed == []
    assert ok == 1
    [finding] = findings
    assert (finding["labels"], finding["cause"]) == ({"namespace": ODD, "pod": "vllm-0"}, "kv_pool_full")


@pytest.mark.parametrize(
    ("query", "label", "reason"),
    [
        ("pod=vllm%FF0", "pod", "not valid UTF-8 (invalid start byte at byte 4)"),
        ("namespace", "namespace", "expected LABEL=VALUE"),
        ("namespace=prod&pod", "pod", "expected LABEL=VALUE"),
        ("match", "match", "expected LABEL=VALUE"),
        ("match=pod", "pod", "expected LABEL=VALUE"),
        ("p%FFd=x", "p%FFd", "not valid UTF-8"),
    ],
)
async def test_a_scope_nobody_could_have_meant_is_400_naming_the_label(
    fleet_url: str, tmp_path: Path, query: str, label: str, reason: str
) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, services):
        for path in ("/diagnose/queue_backlog", "/triage"):
            response = await client.get(f"{path}?{query}")
            assert response.status_code == 400, (path, response.text)
            body = response.json()
            assert (body["error"], body["label"]) == ("bad_scope", label)
            assert reason in body["message"]
        asked = counted(services.metrics.diagnoses, trigger="api", outcome="ok")
    assert asked == 0


async def test_parameters_that_are_not_scope_labels_may_go_without_a_value(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        response = await client.get(f"/diagnose/queue_backlog?namespace=prod&pod=vllm-0&at={AT.timestamp():.0f}&lang")
    # `lang` without a value is FastAPI's to judge (an empty lang is not en or zh), not a scope label.
    assert response.status_code == 422
    assert response.json()["problems"][0]["loc"] == ["query", "lang"]


async def test_starlette_refusals_have_diagnosd_s_error_shape(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        missing = await client.get("/no/such/route")
        wrong = await client.delete("/webhook/alertmanager")
    assert (missing.status_code, missing.json()) == (404, {"error": "not_found", "message": "Not Found"})
    assert (wrong.status_code, wrong.json()["error"]) == (405, "method_not_allowed")
    assert wrong.headers["allow"] == "POST"


async def test_the_openapi_schema_declares_the_moment_and_label_patterns(fleet_url: str, tmp_path: Path) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        spec = (await client.get("/openapi.json")).json()

    def schema(path: str, name: str) -> dict[str, object]:
        [param] = [p for p in spec["paths"][path]["get"]["parameters"] if p["name"] == name]
        found: dict[str, object] = param["schema"]
        return found

    for path, name in [
        ("/diagnose/{symptom}", "at"),
        ("/triage", "at"),
        ("/findings", "since"),
        ("/findings", "until"),
    ]:
        assert schema(path, name)["pattern"] == MOMENT_PATTERN
    assert schema("/findings", "label")["items"] == {"type": "string", "pattern": LABEL_FILTER_PATTERN}


MOMENTS = [
    "2026-01-02T01:00:00Z",
    "2026-01-02T01:00:00+00:00",
    "2026-01-02T02:30:00.123456789+01:30",
    "2026-01-02T01:00:00",
    "1767315600",
    "1767315600.25",
    "2024-02-29T00:00:00Z",
    "LPT1",
    "",
    "now",
    "2025-02-29T00:00:00Z",
    "2026-01-02",
    "2026-01-02 01:00:00Z",
    "2026-01-02T24:00:00Z",
    "2026-01-02T01:00:00+24:00",
    "1e9",
    " 1767315600",
    "nan",
    "١٧٦٧٣١٥٦٠٠",  # Arabic-Indic digits: float() reads them, the pattern does not
    "99999999999",
]


@pytest.mark.parametrize("text", MOMENTS)
async def test_at_is_taken_exactly_when_its_pattern_allows_it(fleet_url: str, tmp_path: Path, text: str) -> None:
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        response = await client.get("/diagnose/queue_backlog", params={"namespace": "prod", "at": text})
        listed = await client.get("/findings", params={"since": text})
    allowed = re.search(MOMENT_PATTERN, text) is not None
    assert (response.status_code, listed.status_code) == ((200, 200) if allowed else (400, 400)), response.text
    if not allowed:
        assert response.json() == {
            "error": "bad_request",
            "message": "at: expected RFC3339 (2026-11-29T14:00:00Z) or Unix seconds",
            "parameter": "at",
        }


def test_every_date_and_time_the_moment_pattern_allows_can_be_read() -> None:
    """Swept, not sampled: each day of 1896-2404 (both leap-year rules twice), months and days one
    past each end, and each hour/minute/second one past its range."""
    pattern = re.compile(MOMENT_PATTERN)
    for year in [*range(1896, 1905), *range(1996, 2005), 2100, 2400, 2404]:
        for month in range(14):
            for day in range(33):
                text = f"{year:04d}-{month:02d}-{day:02d}T00:00:00Z"
                try:
                    date(year, month, day)
                    real = True
                except ValueError:
                    real = False
                assert (pattern.search(text) is not None) == real, text
                if real:
                    parse_moment(text)
    for hour, minute, second in [(24, 0, 0), (0, 60, 0), (0, 0, 60), (23, 59, 59)]:
        text = f"2026-01-02T{hour:02d}:{minute:02d}:{second:02d}Z"
        assert (pattern.search(text) is not None) == ((hour, minute, second) == (23, 59, 59)), text
    assert parse_moment("2026-01-02T23:59:59Z") - parse_moment("2026-01-02T00:00:00Z") == timedelta(seconds=86399)


LABELS = [
    ("pod=vllm-0", True),
    ("pod=", True),
    ("pod=a=b", True),
    ("_=x", True),
    ("_a=x", True),
    ("pod=" + "v" * 1024, True),
    ("", False),
    ("pod", False),
    ("=x", False),
    ("1pod=x", False),
    ("__name__=x", False),
    ("p-d=x", False),
    ("pod=" + "v" * 1025, False),
]


@pytest.mark.parametrize(("text", "allowed"), LABELS)
async def test_a_label_filter_is_taken_exactly_when_its_pattern_allows_it(
    fleet_url: str, tmp_path: Path, text: str, allowed: bool
) -> None:
    assert (re.search(LABEL_FILTER_PATTERN, text) is not None) == allowed
    async with serve(build(settings(fleet_url, tmp_path))) as (client, _):
        response = await client.get("/findings", params={"label": text})
    assert response.status_code == (200 if allowed else 400), response.text
    if not allowed:
        assert response.json()["error"] == "bad_scope"
