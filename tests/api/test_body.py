"""api/body.py reads a JSON body into a model and fails as FastAPI's own body reading fails: one app
serves the same model both ways, and every body gets the same status, error code and problems."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diagnosd.api import body, errors
from diagnosd.api.schemas import Payload
from tests.serving import sample

ROOT = Path(__file__).resolve().parents[2]


def app() -> FastAPI:
    served = FastAPI()
    errors.install(served)

    @served.post("/fastapi")
    async def by_fastapi(payload: Payload) -> dict[str, int]:
        return {"alerts": len(payload.alerts)}

    @served.post("/lean")
    async def by_body(request: Request) -> dict[str, int]:
        payload = await body.read(request, Payload)
        return {"alerts": len(payload.alerts)}

    return served


@asynccontextmanager
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app())
    async with httpx.AsyncClient(transport=transport, base_url="http://diagnosd.test") as c:
        yield c


def shape(response: httpx.Response) -> tuple[int, Any]:
    """What a client can act on: the status, the error code and, for a 422, where each problem is.
    (Not each problem's type: pydantic names one problem differently when it validates JSON and when
    it validates Python objects, `model_type` and `model_attributes_type` for a body not an object.)"""
    answer = response.json()
    if response.status_code == 422:
        assert all(p["msg"] and p["type"] for p in answer["problems"])
        return 422, sorted(tuple(p["loc"]) for p in answer["problems"])
    return response.status_code, answer.get("error", answer)


VALID = json.dumps(sample("webhook-received.json")).encode()
BODIES: list[tuple[str, bytes]] = [
    ("a real delivery", VALID),
    ("empty", b""),
    ("not json", b"{not json"),
    ("truncated", VALID[:-7]),
    ("array", b"[]"),
    ("a number", b"4"),
    ("null", b"null"),
    ("no alerts", b'{"version": "4", "status": "firing"}'),
    ("bad status", b'{"version": "4", "status": "burning", "alerts": []}'),
    ("a label not a string", VALID.replace(b'"namespace": "prod"', b'"namespace": 1')),
    ("startsAt not a time", VALID.replace(b'"startsAt": "', b'"startsAt": "x')),
    ("truncatedAlerts true", b'{"version":"4","status":"firing","alerts":[],"truncatedAlerts":true}'),
    ("truncatedAlerts 5.0", b'{"version":"4","status":"firing","alerts":[],"truncatedAlerts":5.0}'),
    ("not UTF-8", b'{"version":"4","status":"firing","alerts":[],"receiver":"\xff"}'),
    ("a byte order mark", b"\xef\xbb\xbf" + VALID),
    ("nested too deeply", b"[" * 100_000 + b"]" * 100_000),
    ("NaN", b'{"version":"4","status":"firing","alerts":[],"truncatedAlerts":NaN}'),
    ("a duplicate key", b'{"version":"4","status":"resolved","status":"firing","alerts":[]}'),
]


@pytest.mark.parametrize(("name", "raw"), BODIES, ids=[b[0] for b in BODIES])
async def test_a_body_fails_as_fastapi_fails_it(name: str, raw: bytes) -> None:
    headers = {"Content-Type": "application/json"}
    async with client() as c:
        theirs = await c.post("/fastapi", content=raw, headers=headers)
        ours = await c.post("/lean", content=raw, headers=headers)
    assert shape(ours) == shape(theirs), (ours.text, theirs.text)
    assert '"input"' not in ours.text  # nothing sent is echoed back


async def test_json_in_utf_16_is_refused_as_not_utf_8() -> None:
    # json.loads guesses UTF-16 and UTF-32; JSON between systems is UTF-8 (RFC 8259 8.1).
    async with client() as c:
        ours = await c.post(
            "/lean", content=VALID.decode().encode("utf-16"), headers={"Content-Type": "application/json"}
        )
    assert ours.status_code == 400
    assert ours.json()["message"].startswith("the request body cannot be read as JSON: not UTF-8")


async def test_json_content_types_are_read_and_others_refused_with_what_was_sent() -> None:
    async with client() as c:
        taken = [
            await c.post("/lean", content=VALID, headers={"Content-Type": kind})
            for kind in ("application/json", "Application/JSON; charset=utf-8", "application/vnd.alertmanager+json")
        ]
        refused = await c.post("/lean", content=VALID, headers={"Content-Type": "text/plain"})
        missing = await c.post("/lean", content=VALID, headers={"Content-Type": ""})
    assert [r.status_code for r in taken] == [200, 200, 200]
    assert refused.status_code == 422
    assert refused.json()["message"] == "body: expected Content-Type application/json, got text/plain"
    assert missing.status_code == 422
    assert "got none" in missing.json()["message"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
        lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
        max_leaves=12,
    ),
    st.sampled_from(["version", "status", "alerts", "truncatedAlerts", "groupLabels", "receiver"]),
)
async def test_any_json_in_any_field_fails_alike(value: Any, field: str) -> None:
    document = json.loads(VALID) | {field: value}
    raw = json.dumps(document).encode()
    async with client() as c:
        theirs = await c.post("/fastapi", content=raw, headers={"Content-Type": "application/json"})
        ours = await c.post("/lean", content=raw, headers={"Content-Type": "application/json"})
    assert shape(ours) == shape(theirs), (ours.text, theirs.text)
