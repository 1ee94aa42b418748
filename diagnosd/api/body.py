"""A JSON request body read straight into a pydantic model, failing as FastAPI's own body reading
fails (the same exceptions, so api/errors.py gives them the same shapes).

FastAPI decodes a body with json.loads into Python objects and validates those; a route that reads
its body here has pydantic-core parse the bytes and validate in one pass instead, which is what lets
the webhook's route skip FastAPI's per-request dependency solving (routes/webhook.py).
"""

from __future__ import annotations

import codecs
from typing import TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

Model = TypeVar("Model", bound=BaseModel)

# pydantic-core's JSON parser refuses nesting past this depth, where json.loads would recurse on.
_TOO_DEEP = "recursion limit exceeded"


def is_json(content_type: str | None) -> bool:
    """application/json or application/*+json, parameters aside (what FastAPI decodes as JSON)."""
    kind, _, subtype = (content_type or "").partition(";")[0].strip().lower().partition("/")
    return kind == "application" and (subtype == "json" or subtype.endswith("+json"))


async def read(request: Request, model: type[Model]) -> Model:
    """The body as `model`. Raises RequestValidationError (its errors located under "body", as
    FastAPI locates them) for a body that is missing, not JSON, not of a JSON content type or not
    valid for the model; HTTPException 400 from the cause for bytes that cannot be decoded at all
    (not UTF-8, nested too deeply), as FastAPI raises for them."""
    raw = await request.body()
    if not raw:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    if not is_json(request.headers.get("content-type")):
        kind = request.headers.get("content-type") or "none"
        message = f"expected Content-Type application/json, got {kind}"
        raise RequestValidationError([{"type": "content_type", "loc": ("body",), "msg": message, "input": None}])
    # json.loads, and so FastAPI, takes a UTF-8 byte order mark; it also guesses UTF-16 and UTF-32,
    # which JSON between systems may not use (RFC 8259 8.1): those are refused here as not UTF-8.
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        problems = error.errors(include_url=False, include_input=False)
        undecodable = [p for p in problems if p["type"] == "json_invalid"]
        if undecodable:
            _undecodable(raw, str((undecodable[0].get("ctx") or {}).get("error", "")))
        raise RequestValidationError([{**p, "loc": ("body", *p["loc"])} for p in problems]) from None


def _undecodable(raw: bytes, reason: str) -> None:
    """Raises the exception FastAPI raises for this undecodable body."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise HTTPException(400, "There was an error parsing the body") from error
    if reason.startswith(_TOO_DEEP):
        raise HTTPException(400, "There was an error parsing the body") from RecursionError(reason)
    json_invalid = {"type": "json_invalid", "loc": ("body",), "msg": "JSON decode error", "ctx": {"error": reason}}
    raise RequestValidationError([json_invalid])
