"""The FastAPI application factory: `create_app(runtime)`; nothing is built at import time.

Its lifespan opens the live services (Prometheus client, store, metrics, alert inbox, scheduler)
and closes them when the server stops; handlers reach them through request state. `/docs` is
Swagger UI served from the installed swagger-ui-py package (under /docs/static), never from a
CDN, so that it works air-gapped; like /openapi.json it needs no credentials.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from diagnosd import __version__
from diagnosd.api import errors
from diagnosd.api.auth import SCHEMES as AUTH_SCHEMES
from diagnosd.api.auth import Credentials
from diagnosd.api.limits import BodyLimit, Scope
from diagnosd.api.routes import diagnose, findings, health, metrics, symptoms, triage, webhook
from diagnosd.daemon.compose import Runtime, open_services
from diagnosd.daemon.settings.model import WEBHOOK_ENDPOINTS

DESCRIPTION = """diagnosd walks LLM-serving troubleshooting trees against Prometheus and says which
branch holds, with the evidence. Findings come from scheduler rounds and Alertmanager alerts."""

DOCS_STATIC = "/docs/static"
# Swagger UI 5 (OpenAPI 3.1, what FastAPI describes) as the swagger-ui-py package ships it.
SWAGGER_JS, SWAGGER_CSS, SWAGGER_FAVICON = "swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"


def swagger_assets() -> str:
    """The directory of the installed Swagger UI files."""
    return str(resources.files("swagger_ui") / "static")


def create_app(runtime: Runtime) -> FastAPI:
    credentials = Credentials.from_settings(runtime.settings.auth)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_services(runtime) as services:
            app.state.services = services
            try:
                yield
            finally:
                del app.state.services

    app = FastAPI(
        title="diagnosd",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.credentials = credentials
    _docs(app)
    errors.install(app)
    # The webhook first: a storm is the one load on the daemon's routes, and each route tried before
    # the one that takes a request costs it a match.
    for module in (webhook, diagnose, triage, symptoms, findings, health, metrics):
        app.include_router(module.router)
    _describe_security(app, credentials)
    app.add_middleware(BodyLimit, max_bytes=runtime.settings.webhook.max_body_bytes, on_reject=_count_too_large)
    return app


def _docs(app: FastAPI) -> None:
    """GET /docs: Swagger UI whose every asset this app serves."""
    app.mount(DOCS_STATIC, StaticFiles(directory=swagger_assets()), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = str(request.scope.get("root_path", "")).rstrip("/")
        static = root + DOCS_STATIC
        return get_swagger_ui_html(
            openapi_url=root + (app.openapi_url or "/openapi.json"),
            title=f"{app.title} API",
            swagger_js_url=f"{static}/{SWAGGER_JS}",
            swagger_css_url=f"{static}/{SWAGGER_CSS}",
            swagger_favicon_url=f"{static}/{SWAGGER_FAVICON}",
        )


def _describe_security(app: FastAPI, credentials: Credentials) -> None:
    """The OpenAPI description says, per operation, the credentials it takes as these settings
    configure them (the dependencies read the header themselves, unseen by FastAPI's schema): an
    operation that may answer 401 takes the webhook's credentials or the API's."""
    described = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = described()  # built once, and kept in app.openapi_schema
        used: set[str] = set()
        for path, operations in schema.get("paths", {}).items():
            hook = path.startswith(WEBHOOK_ENDPOINTS)
            security = credentials.webhook_security() if hook else credentials.api_security()
            for operation in operations.values():
                if security and "401" in operation.get("responses", {}):
                    operation["security"] = security
                    used |= {name for alternative in security for name in alternative}
        if used:
            schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes.update({name: AUTH_SCHEMES[name] for name in sorted(used)})
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _count_too_large(scope: Scope) -> None:
    app = scope.get("app")
    services = getattr(app.state, "services", None) if app is not None else None
    if services is not None and scope.get("path") == "/webhook/alertmanager":
        services.metrics.deliveries.labels("too_large").inc()
