"""/docs works air-gapped: Swagger UI and every asset it loads come from diagnosd itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.serving import TOKEN, build, serve, settings

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
