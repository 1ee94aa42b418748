"""Shared request dependencies: the live services, authentication, and the parameters several
routes read (a symptom's tree, a scope from query parameters, a time). Lookups that fail raise
domain errors, mapped to HTTP in api/errors.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Depends, Header, Path, Query, Request

from diagnosd.api.auth import Credentials
from diagnosd.daemon.compose import Services
from diagnosd.engine import Scope
from diagnosd.errors import RequestError
from diagnosd.moments import parse_moment
from diagnosd.trees import Tree

# Query parameters of /diagnose that are not scope labels; `match=LABEL=VALUE` scopes any label.
RESERVED = frozenset({"at", "format", "lang", "match", "verbose"})


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


async def require_webhook(
    creds: Annotated[Credentials, Depends(credentials)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> None:
    creds.check_webhook(authorization)


def tree(symptom: Annotated[str, Path(description="a symptom id, e.g. queue_backlog")], svc: ServicesDep) -> Tree:
    return svc.diagnoser.tree(symptom)


TreeDep = Annotated[Tree, Depends(tree)]


def scope(request: Request) -> Scope:
    """Every query parameter but at/format/lang/verbose is `label=value`; `match=label=value` for any label."""
    items: list[str] = []
    for name, value in request.query_params.multi_items():
        if name == "match":
            items.append(value)
        elif name not in RESERVED:
            items.append(f"{name}={value}")
    return Scope.parse(items)


ScopeDep = Annotated[Scope, Depends(scope)]


def parse_time(name: str, text: str) -> datetime:
    """RFC3339 or Unix seconds, as the CLI's --at; raises RequestError naming the parameter."""
    try:
        return parse_moment(text)
    except ValueError:
        raise RequestError(name, "expected RFC3339 (2026-11-29T14:00:00Z) or Unix seconds") from None


def at(
    at: Annotated[
        str | None, Query(description="evaluate at this time: RFC3339 or Unix seconds (default: now)")
    ] = None,
) -> datetime | None:
    return parse_time("at", at) if at is not None else None


AtDep = Annotated[datetime | None, Depends(at)]
