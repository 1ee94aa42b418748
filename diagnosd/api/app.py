"""The FastAPI application factory: `create_app(runtime)`; nothing is built at import time.

Its lifespan opens the live services (Prometheus client, store, metrics, alert inbox, scheduler)
and closes them when the server stops; handlers reach them through request state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from diagnosd import __version__
from diagnosd.api import errors
from diagnosd.api.auth import Credentials
from diagnosd.api.limits import BodyLimit, Scope
from diagnosd.api.routes import diagnose, findings, health, metrics, symptoms, webhook
from diagnosd.runtime import Runtime
from diagnosd.services import open_services

DESCRIPTION = """diagnosd walks LLM-serving troubleshooting trees against Prometheus and says which
branch holds, with the evidence. Findings come from scheduler rounds and Alertmanager alerts."""


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
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    app.state.credentials = credentials
    errors.install(app)
    for module in (diagnose, symptoms, findings, webhook, health, metrics):
        app.include_router(module.router)
    app.add_middleware(BodyLimit, max_bytes=runtime.settings.webhook.max_body_bytes, on_reject=_count_too_large)
    return app


def _count_too_large(scope: Scope) -> None:
    app = scope.get("app")
    services = getattr(app.state, "services", None) if app is not None else None
    if services is not None and scope.get("path") == "/webhook/alertmanager":
        services.metrics.deliveries.labels("too_large").inc()
