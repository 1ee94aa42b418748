"""/docs works air-gapped: Swagger UI and every asset it loads come from diagnosd itself; the
OpenAPI description says which credentials each operation takes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from diagnosd.api import create_app
from diagnosd.api.auth import PUBLIC_PATHS, SCHEMES
from diagnosd.daemon.settings.model import API_ENDPOINTS, WEBHOOK_ENDPOINTS
from tests.serving import HOOK_TOKEN, TOKEN, build, serve, settings

TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


@pytest.mark.parametrize("tokens", [[], [TOKEN]], ids=["open", "with-api-tokens"])
async def test_docs_reference_only_assets_the_app_serves(fleet_url: str, tmp_path: Path, tokens: list[str]) -> None:
    # Like /openapi.json, /docs and its assets need no token (the API behind them still does).
    async with serve(build(settings(fleet_url, tmp_path, auth={"api_tokens": tokens}))) as (client, _):
        page = await client.get("/docs")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        html = page.text
        assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html)
        assert not re.search(r"""["'(]\s*(?:https?:)?//""", html), "an asset from outside the app"
        assert len(assets) == 3  # script, stylesheet, icon
        for asset in assets:
            assert asset.startswith("/docs/static/"), asset
            response = await client.get(asset)
            assert response.status_code == 200, asset
            assert TYPES[Path(asset).suffix] in response.headers["content-type"], asset
            assert len(response.content) > 100
        spec = re.search(r"url: '([^']+)'", html)
        assert spec is not None
        openapi = await client.get(spec.group(1))
        assert openapi.status_code == 200
        assert openapi.json()["openapi"].startswith("3.1")
        missing = await client.get("/docs/static/no-such-file.js")
        assert missing.status_code == 404


def test_the_bundled_swagger_ui_reads_openapi_3_1() -> None:
    """FastAPI describes the API as OpenAPI 3.1; Swagger UI before 5 refuses to render that."""
    from diagnosd.api.app import SWAGGER_JS, swagger_assets

    bundle = (Path(swagger_assets()) / SWAGGER_JS).read_text(encoding="utf-8")
    assert "isOAS31" in bundle


CREDENTIALS: dict[str, dict[str, Any]] = {
    "nothing": {},
    "api-token": {"api_tokens": [TOKEN]},
    "webhook-token": {"webhook_tokens": [HOOK_TOKEN]},
    "webhook-basic": {"webhook_username": "alertmanager", "webhook_password": HOOK_TOKEN},
    "all": {
        "api_tokens": [TOKEN],
        "webhook_tokens": [HOOK_TOKEN],
        "webhook_username": "alertmanager",
        "webhook_password": HOOK_TOKEN,
    },
}


@pytest.mark.parametrize("auth", CREDENTIALS.values(), ids=CREDENTIALS.keys())
def test_openapi_says_which_credentials_each_operation_takes(fleet_url: str, tmp_path: Path, auth: Any) -> None:
    # Exactly the operations the settings close carry a security requirement, and it names what
    # the daemon checks there: Swagger UI's Authorize and generated clients send the right header.
    built = build(settings(fleet_url, tmp_path, auth=auth))
    spec = create_app(built).openapi()
    opened = {group for groups, _ in built.settings.auth.open_endpoints() for group in groups}
    hook = ([{"bearer": []}] if auth.get("webhook_tokens") else []) + (
        [{"basic": []}] if auth.get("webhook_username") else []
    )
    expected_hook = hook or ([{"bearer": []}] if auth.get("api_tokens") else [])
    used: set[str] = set()
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            if path in PUBLIC_PATHS:
                assert "security" not in operation, where
            elif path.startswith(WEBHOOK_ENDPOINTS):
                assert operation.get("security", []) == expected_hook, where
            else:
                assert path.startswith(API_ENDPOINTS), where
                assert operation.get("security", []) == ([{"bearer": []}] if auth.get("api_tokens") else []), where
            open_ = any(path.startswith(group) for group in opened)
            assert open_ == ("security" not in operation) or path in PUBLIC_PATHS, where
            used |= {name for alternative in operation.get("security", []) for name in alternative}
    assert bool(used) == bool(auth)  # any credential configured is described somewhere
    schemes = spec.get("components", {}).get("securitySchemes", {})
    assert schemes == {name: SCHEMES[name] for name in used}
    assert all(scheme["type"] == "http" for scheme in schemes.values())
