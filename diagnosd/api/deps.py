"""Shared request dependencies: the live services, authentication, and the parameters several
routes read (a symptom's tree, a scope from query parameters, a time). Lookups that fail raise
domain errors, mapped to HTTP in api/errors.py.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated
from urllib.parse import unquote_to_bytes

from fastapi import Depends, Header, Path, Query, Request

from diagnosd.api.auth import Credentials
from diagnosd.daemon.compose import Services
from diagnosd.engine import Scope
from diagnosd.engine.scope import MAX_VALUE
from diagnosd.errors import RequestError, ScopeError
from diagnosd.moments import parse_moment
from diagnosd.trees import Tree

# Query parameters of /diagnose that are not scope labels; `match=LABEL=VALUE` scopes any label.
RESERVED = frozenset({"at", "format", "lang", "match", "verbose"})

# The OpenAPI patterns of the parameters read here, checked by the same code that reads them, so
# that a value the schema allows is taken and one it does not is refused (400). Written in the
# subset of regex syntax ECMA-262 (what OpenAPI tools use) and Python share: [0-9], not \d, which
# Python also takes for other scripts' digits.
_D = "[0-9]"
_MONTH_DAY = f"(0[13578]|1[02])-(0[1-9]|[12]{_D}|3[01])|(0[469]|11)-(0[1-9]|[12]{_D}|30)|02-(0[1-9]|1{_D}|2[0-8])"
# Years divisible by 4, but of the centuries only those divisible by 400.
_LEAP_YEAR = f"[1-9]{_D}(0[48]|[2468][048]|[13579][26])|([2468][048]|[13579][26])00"
_RFC3339 = (
    f"([1-9]{_D}{{3}}-({_MONTH_DAY})|({_LEAP_YEAR})-02-29)"
    f"T([01]{_D}|2[0-3]):[0-5]{_D}:[0-5]{_D}(\\.{_D}{{1,9}})?(Z|[+-]([01]{_D}|2[0-3]):[0-5]{_D})?"
)
# Unix seconds up to 9999999999 (year 2286).
_UNIX = f"{_D}{{1,10}}(\\.{_D}{{1,9}})?"
MOMENT_PATTERN = f"^({_RFC3339}|{_UNIX})$"
# LABEL=VALUE as Scope.parse takes it: a label name not starting with __, a value of at most MAX_VALUE.
LABEL_FILTER_PATTERN = f"^([a-zA-Z][a-zA-Z0-9_]*|_[a-zA-Z0-9][a-zA-Z0-9_]*|_)=[\\s\\S]{{0,{MAX_VALUE}}}$"
_MOMENT = re.compile(MOMENT_PATTERN)


# The dependencies that only look something up are coroutines: FastAPI runs a plain function in
# its thread pool, a hand-off that costs more than the lookup (it dominated the webhook's ack).
async def services(request: Request) -> Services:
    found: Services = request.app.state.services
    return found


ServicesDep = Annotated[Services, Depends(services)]


async def credentials(request: Request) -> Credentials:
    found: Credentials = request.app.state.credentials
    return found


async def require_api(
    creds: Annotated[Credentials, Depends(credentials)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> None:
    creds.check_api(authorization)


def tree(symptom: Annotated[str, Path(description="a symptom id, e.g. queue_backlog")], svc: ServicesDep) -> Tree:
    return svc.diagnoser.tree(symptom)


TreeDep = Annotated[Tree, Depends(tree)]


def scope(request: Request) -> Scope:
    """Every query parameter but at/format/lang/verbose is `label=value`; `match=label=value` for any label.

    Read from the raw query string, not request.query_params: those make `?pod` into pod="" and
    replace bytes that are not UTF-8 with U+FFFD, scoping to a value nobody sent.
    """
    items: list[str] = []
    for part in request.scope.get("query_string", b"").split(b"&"):
        if not part:
            continue
        raw_name, sep, raw_value = part.partition(b"=")
        name = _unquoted(raw_name, raw_name.decode("ascii", "backslashreplace"))
        if name in RESERVED and name != "match":
            continue
        if not sep:
            raise ScopeError(name, "expected LABEL=VALUE")
        value = _unquoted(raw_value, name)
        items.append(value if name == "match" else f"{name}={value}")
    return Scope.parse(items)


def _unquoted(raw: bytes, name: str) -> str:
    try:
        return unquote_to_bytes(raw.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError as error:
        raise ScopeError(name, f"not valid UTF-8 ({error.reason} at byte {error.start})") from None


ScopeDep = Annotated[Scope, Depends(scope)]


def parse_time(name: str, text: str) -> datetime:
    """RFC3339 or Unix seconds (MOMENT_PATTERN); raises RequestError naming the parameter."""
    if not _MOMENT.fullmatch(text):
        raise RequestError(name, "expected RFC3339 (2026-11-29T14:00:00Z) or Unix seconds")
    try:
        return parse_moment(text)
    except ValueError:
        raise RequestError(name, "expected RFC3339 (2026-11-29T14:00:00Z) or Unix seconds") from None


def at(
    at: Annotated[
        str | None,
        Query(
            description="evaluate at this time: RFC3339 or Unix seconds (default: now)",
            json_schema_extra={"pattern": MOMENT_PATTERN},
        ),
    ] = None,
) -> datetime | None:
    return parse_time("at", at) if at is not None else None


AtDep = Annotated[datetime | None, Depends(at)]
