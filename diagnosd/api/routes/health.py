"""GET /healthz (the process serves) and /readyz (rules loaded, store open, Prometheus answers and
its circuit is closed)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from diagnosd.api.deps import ServicesDep
from diagnosd.api.schemas import CircuitOut, HealthOut, ProbeOut, ReadyOut
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
    summary="Readiness: rules loaded, store open, Prometheus answers a query and its circuit is closed",
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
    # Unset: only the prometheus check has a circuit to show.
    return JSONResponse(body.model_dump(exclude_unset=True), status_code=200 if ready else 503)


def _rules(count: int) -> ProbeOut:
    return ProbeOut(ok=count > 0, detail=f"{count} trees loaded")


def _store(store: Store) -> ProbeOut:
    try:
        state = store.database.probe()
    except Exception as error:  # whatever the database says, the store cannot serve
        return ProbeOut(ok=False, detail=f"store unusable: {error}")
    return ProbeOut(ok=True, detail=f"open ({state})")


async def _prometheus(svc: ServicesDep) -> ProbeOut:
    """Through the circuit's readiness door: open, nothing is sent (a probe every few seconds must
    not hammer a Prometheus that is failing); due for a probe, this may be it; closed, a failure
    counts but a success does not keep the circuit closed for the real queries."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            await svc.source.check(PROBE_QUERY, datetime.now(UTC))
    except SourceError as error:
        return ProbeOut(ok=False, detail=str(error), circuit=_circuit(svc))
    except TimeoutError:
        detail = f"no answer to {PROBE_QUERY} within {PROBE_TIMEOUT:g}s"
        return ProbeOut(ok=False, detail=detail, circuit=_circuit(svc))
    circuit = _circuit(svc)
    if circuit.state != "closed":  # answered, but the circuit opened meanwhile
        return ProbeOut(ok=False, detail=f"answers queries, but its circuit is {circuit.state}", circuit=circuit)
    return ProbeOut(ok=True, detail="answers queries", circuit=circuit)


def _circuit(svc: ServicesDep) -> CircuitOut:
    status = svc.source.circuit.status()
    return CircuitOut(
        state=str(status.state),
        failures=status.failures,
        openings=status.openings,
        next_probe_in_seconds=status.probe_in,
        last_error=status.last,
    )
