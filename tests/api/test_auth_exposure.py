"""What anyone may call: the endpoints the settings declare open (and refuse off loopback) are
exactly those the real app answers without credentials; tokens in a query string stay out of
uvicorn's access log.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from starlette.routing import Mount, Route

from diagnosd.api import create_app
from diagnosd.api.app import SWAGGER_CSS
from diagnosd.api.auth import PUBLIC_PATHS, RedactQueries
from diagnosd.daemon.settings.loader import load_settings
from diagnosd.daemon.settings.model import AuthSettings
from diagnosd.errors import SettingsError
from tests.serving import HOOK_TOKEN, TOKEN, build, serve, settings

SECRET = "query-secret-0123456789abcdef"
# A value for each path parameter, so that every route can be called.
PATH_VALUES = {"{symptom}": "queue_backlog", "{finding_id}": "0123456789abcdef"}

CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "nothing": {},
    "webhook-token": {"webhook_tokens": [HOOK_TOKEN]},
    "webhook-basic": {"webhook_username": "alertmanager", "webhook_password": HOOK_TOKEN},
    "api-token": {"api_tokens": [TOKEN]},
    "api-and-webhook": {"api_tokens": [TOKEN], "webhook_tokens": [HOOK_TOKEN]},
}


def calls(built: Any) -> list[tuple[str, str, str]]:
    """(route path, method, a URL that reaches it) for every operation of the real app's OpenAPI
    description and every route and mount it serves outside it (/docs, /openapi.json, assets)."""
    app = create_app(built)
    found: set[tuple[str, str]] = {
        (path, method.upper()) for path, item in app.openapi()["paths"].items() for method in item
    }
    out = [(route.path, "GET", f"{route.path}/{SWAGGER_CSS}") for route in app.routes if isinstance(route, Mount)]
    for route in app.routes:
        if isinstance(route, Route):
            found |= {(route.path, method) for method in route.methods or () if method != "HEAD"}
    for path, method in sorted(found):
        url = path
        for name, value in PATH_VALUES.items():
            url = url.replace(name, value)
        assert "{" not in url, f"no value for a parameter of {path}"
        out.append((path, method, url))
    return out


def declared_open(auth: AuthSettings, path: str) -> bool:
    groups = [group for paths, _ in auth.open_endpoints() for group in paths]
    return any(path == group or path.startswith(f"{group}/") for group in groups)


def public(path: str) -> bool:
    return path in PUBLIC_PATHS or path == "/docs/static"


@pytest.mark.parametrize("auth", CONFIGURATIONS.values(), ids=CONFIGURATIONS.keys())
async def test_the_declared_open_endpoints_are_those_the_app_serves_anonymously(
    fleet_url: str, tmp_path: Path, auth: dict[str, Any]
) -> None:
    built = build(settings(fleet_url, tmp_path, auth=auth))
    routes = calls(built)
    async with serve(built) as (client, _):
        answered = {
            (path, method): (await client.request(method, url, json={})).status_code for path, method, url in routes
        }
    assert {"/diagnose/{symptom}", "/findings", "/symptoms", "/metrics", "/webhook/alertmanager"} <= {
        p for p, _ in answered
    }
    for (path, method), status in answered.items():
        expected_open = public(path) or declared_open(built.settings.auth, path)
        assert (status != 401) == expected_open, f"{method} {path} answered {status} anonymously"


def test_off_loopback_a_basic_auth_pair_alone_leaves_the_api_open() -> None:
    env = {
        "DIAGNOSD_PROMETHEUS_URL": "http://127.0.0.1:9",
        "DIAGNOSD_SERVER_HOST": "0.0.0.0",
        "DIAGNOSD_AUTH_WEBHOOK_USERNAME": "alertmanager",
        "DIAGNOSD_AUTH_WEBHOOK_PASSWORD": HOOK_TOKEN,
    }
    with pytest.raises(SettingsError) as caught:
        load_settings(None, env)
    message = str(caught.value)
    assert "/diagnose, /triage, /symptoms, /findings, /metrics (set auth.api_tokens)" in message
    assert "/webhook/alertmanager" not in message
    assert HOOK_TOKEN not in message
    # A proxy that authenticates is the one way to serve them open.
    load_settings(None, env | {"DIAGNOSD_AUTH_ALLOW_ANONYMOUS": "true"})


def test_with_nothing_set_every_group_is_named_with_what_closes_it() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(None, {"DIAGNOSD_PROMETHEUS_URL": "http://127.0.0.1:9", "DIAGNOSD_SERVER_HOST": "::"})
    message = str(caught.value)
    assert "/metrics (set auth.api_tokens)" in message
    assert "/webhook/alertmanager (set auth.webhook_tokens, auth.webhook_username/webhook_password" in message


def access_line(target: str) -> logging.LogRecord:
    """A record as uvicorn's access logger makes it."""
    args = ("127.0.0.1:50000", "GET", target, "1.1", 401)
    return logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None)


@pytest.mark.parametrize(
    ("target", "logged"),
    [
        (f"/findings?access_token={SECRET}", "/findings?[redacted]"),
        (f"/diagnose/queue_backlog?pod=vllm-0&access_token={SECRET}", "/diagnose/queue_backlog?[redacted]"),
        (f"/no/such/route?access_token={SECRET}", "/no/such/route?[redacted]"),
        ("/findings", "/findings"),
        ("/readyz?verbose=1", "/readyz?verbose=1"),
    ],
)
def test_access_lines_keep_query_strings_of_public_paths_only(target: str, logged: str) -> None:
    record = access_line(target)
    assert RedactQueries().filter(record)
    assert record.getMessage() == f'127.0.0.1:50000 - "GET {logged} HTTP/1.1" 401'
