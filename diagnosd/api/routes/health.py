"""GET /healthz (the process serves) and /readyz (rules loaded, store open, Prometheus answers)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from diagnosd.api.deps import ServicesDep
from diagnosd.api.schemas import HealthOut, ProbeOut, ReadyOut
from diagnosd.errors import SourceError
from diagnosd.findings.store import Store

router = APIRouter(tags=["health"])

PROBE_QUERY = "vector(1)"
PROBE_TIMEOUT = 5.0


@router.get("/healthz", operation_id="healthz", summary="Liveness: the process serves requests")
async def healthz() -> HealthOut:
    return HealthOut(status="ok")


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="Readiness: rules loaded, store open, Prometheus answers a query",
    responses={503: {"model": ReadyOut}},
)
async def readyz(svc: ServicesDep) -> JSONResponse:
    checks = {
        "rules": _rules(len(svc.diagnoser.ruleset.trees)),
        "store": _store(svc.store),
        "prometheus": await _prometheus(svc),
    }
    ready = all(c.ok for c in checks.values())
    body = ReadyOut(ready=ready, checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


def _rules(count: int) -> ProbeOut:
    return ProbeOut(ok=count > 0, detail=f"{count} trees loaded")


def _store(store: Store) -> ProbeOut:
    try:
        state = store.database.probe()
    except Exception as error:  # whatever the database says, the store cannot serve
        return ProbeOut(ok=False, detail=f"store unusable: {error}")
    return ProbeOut(ok=True, detail=f"open ({state})")


async def _prometheus(svc: ServicesDep) -> ProbeOut:
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            await svc.source.query(PROBE_QUERY, datetime.now(UTC))
    except SourceError as error:
        return ProbeOut(ok=False, detail=str(error))
    except TimeoutError:
        return ProbeOut(ok=False, detail=f"no answer to {PROBE_QUERY} within {PROBE_TIMEOUT:g}s")
    return ProbeOut(ok=True, detail="answers queries")
