"""Domain errors to HTTP, in one place: status, a stable error code, a precise message.

Bodies are `{"error": code, "message": text, ...data}`. Nothing a client sent is echoed back
beyond what the message needs (never a credential, never a whole body).
"""

from __future__ import annotations

import logging
import math
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from diagnosd.errors import (
    DiagnosdError,
    FindingNotFound,
    ParamError,
    QueueFull,
    RequestError,
    ScopeError,
    SourceError,
    SourceTimeout,
    SourceUnavailable,
    StoreError,
    Unauthorized,
    UnknownSymptom,
)

log = logging.getLogger(__name__)

# Seconds a 503 asks a client to wait when nothing says how long: an alert queue full, Prometheus
# unreachable with its circuit still closed, or a circuit half-open (its one probe asking now).
DEFAULT_RETRY_AFTER = 5


def install(app: FastAPI) -> None:
    app.add_exception_handler(DiagnosdError, _domain)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http)  # type: ignore[arg-type]


def status_of(error: DiagnosdError) -> tuple[int, str]:
    """The HTTP status and error code of a domain error."""
    table: list[tuple[type[DiagnosdError], int, str]] = [
        (UnknownSymptom, 404, "unknown_symptom"),
        (FindingNotFound, 404, "unknown_finding"),
        (ScopeError, 400, "bad_scope"),
        (ParamError, 400, "bad_param"),
        (RequestError, 400, "bad_request"),
        (Unauthorized, 401, "unauthorized"),
        (QueueFull, 503, "queue_full"),
        (SourceUnavailable, 503, "prometheus_unavailable"),
        (SourceTimeout, 504, "prometheus_timeout"),
        (SourceError, 502, "prometheus_error"),
        (StoreError, 500, "store_error"),
    ]
    for kind, status, code in table:
        if isinstance(error, kind):
            return status, code
    return 500, "internal_error"


def _extra(error: DiagnosdError) -> dict[str, Any]:
    if isinstance(error, UnknownSymptom):
        return {"known": list(error.known)}
    if isinstance(error, SourceError):
        return {"prometheus": error.url, "query": error.query}
    if isinstance(error, ScopeError):
        return {"label": error.label}
    if isinstance(error, RequestError):
        return {"parameter": error.parameter}
    return {}


async def _domain(request: Request, error: DiagnosdError) -> JSONResponse:
    status, code = status_of(error)
    message = str(error)
    if isinstance(error, SourceUnavailable):
        message = f"Prometheus cannot be reached, so nothing was looked at: {error.detail}"
    elif isinstance(error, SourceTimeout):
        message = f"Prometheus did not answer in time, so nothing was looked at: {error.detail}"
    elif isinstance(error, SourceError):
        message = f"Prometheus answered wrongly, so nothing was looked at: {error.detail}"
    if status >= 500:
        log.warning("%s %s -> %d %s: %s", request.method, request.url.path, status, code, error)
    headers: dict[str, str] = {}
    if isinstance(error, Unauthorized):
        headers["WWW-Authenticate"] = f'{error.scheme} realm="diagnosd"'
    elif status == 503:
        headers["Retry-After"] = str(retry_after(error, request))
    body = {"error": code, "message": message, **_extra(error)}
    return JSONResponse(body, status_code=status, headers=headers)


def retry_after(error: DiagnosdError, request: Request) -> int:
    """Whole seconds until a call may be served (rounded up, at least 1). Prometheus unavailable:
    until the open circuit's next probe (diagnosd asks no sooner, whatever a client does; never
    sooner than a Retry-After Prometheus sent, which opened it), else what the failure said, else
    (a circuit half-open, a queue full) DEFAULT_RETRY_AFTER."""
    wait = None
    if isinstance(error, SourceUnavailable):
        wait = _probe_in(request)
        if wait is None:
            wait = error.retry_after
    if wait is None:
        return DEFAULT_RETRY_AFTER
    return max(math.ceil(wait), 1)


def _probe_in(request: Request) -> float | None:
    services = getattr(request.app.state, "services", None)
    if services is None:
        return None
    probe_in: float | None = services.source.circuit.status().probe_in
    return probe_in


async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    problems: list[dict[str, Any]] = [
        {"loc": list(item.get("loc", ())), "msg": str(item.get("msg", "")), "type": str(item.get("type", ""))}
        for item in error.errors()
    ]
    if any(p["type"] == "json_invalid" for p in problems):
        details = "; ".join(_json_detail(item) for item in error.errors() if item.get("type") == "json_invalid")
        invalid = {"error": "invalid_json", "message": f"the request body is not valid JSON: {details}"}
        return JSONResponse(invalid, status_code=400)
    summary = "; ".join(f"{'.'.join(str(x) for x in p['loc'])}: {p['msg']}" for p in problems)
    body: dict[str, Any] = {"error": "invalid_request", "message": summary, "problems": problems}
    return JSONResponse(body, status_code=422)


async def _http(request: Request, error: HTTPException) -> JSONResponse:
    """The framework's own refusals (no route, wrong method, a body it cannot read) in the same shape."""
    cause = error.__cause__
    if error.status_code == 400 and cause is not None:
        # FastAPI raises a bare "error parsing the body" for whatever json.loads raises but a
        # JSONDecodeError: bytes that are not UTF-8, nesting beyond the decoder's recursion limit.
        message = f"the request body cannot be read as JSON: {_unreadable(cause)}"
        return JSONResponse({"error": "invalid_json", "message": message}, status_code=400)
    try:
        code = HTTPStatus(error.status_code).name.lower()
    except ValueError:
        code = "http_error"
    return JSONResponse(
        {"error": code, "message": str(error.detail)}, status_code=error.status_code, headers=error.headers
    )


def _unreadable(cause: BaseException) -> str:
    """Why a body could not be decoded, without echoing it."""
    if isinstance(cause, UnicodeDecodeError):
        return f"not UTF-8 ({cause.reason} at byte {cause.start})"
    if isinstance(cause, RecursionError):
        return "nested too deeply"
    return type(cause).__name__


def _json_detail(item: Any) -> str:
    ctx = item.get("ctx") or {}
    where = item.get("loc", ())
    position = f" at character {where[-1]}" if len(where) > 1 and isinstance(where[-1], int) else ""
    return f"{ctx.get('error', 'cannot decode')}{position}"
