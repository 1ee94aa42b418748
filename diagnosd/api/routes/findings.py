"""GET /findings (active and recent, filtered) and GET /findings/{finding_id} (with its episodes)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Query

from diagnosd.api.deps import LABEL_FILTER_PATTERN, MOMENT_PATTERN, ServicesDep, parse_time, require_api
from diagnosd.api.schemas import UNAUTHORIZED, ErrorOut, FindingDetailOut, FindingListOut, finding_detail, finding_out
from diagnosd.engine import Scope
from diagnosd.errors import FindingNotFound
from diagnosd.findings.lifecycle import State
from diagnosd.findings.store import FindingQuery

router = APIRouter(tags=["findings"], dependencies=[Depends(require_api)], responses=UNAUTHORIZED)

StateFilter = Literal["active", "pending", "firing", "resolved", "all"]
STATES: dict[str, tuple[State, ...]] = {
    "active": (State.PENDING, State.FIRING),
    "pending": (State.PENDING,),
    "firing": (State.FIRING,),
    "resolved": (State.RESOLVED,),
    "all": (State.PENDING, State.FIRING, State.RESOLVED),
}


@router.get(
    "/findings",
    operation_id="listFindings",
    summary="Findings active now or within the time range (default: active, and resolved in the last hour)",
    responses={400: {"model": ErrorOut}},
)
async def list_findings(
    svc: ServicesDep,
    state: Annotated[StateFilter, Query(description="which states to list")] = "all",
    symptom: Annotated[str | None, Query(description="only this symptom id")] = None,
    cause: Annotated[str | None, Query(description="only this cause id")] = None,
    label: Annotated[
        list[str],
        Query(
            description="target label filter LABEL=VALUE (repeatable: every filter must hold)",
            json_schema_extra={"items": {"type": "string", "pattern": LABEL_FILTER_PATTERN}},
        ),
    ] = [],  # noqa: B006
    since: Annotated[
        str | None,
        Query(
            description="active at or after (RFC3339 or Unix; default: 1h ago)",
            json_schema_extra={"pattern": MOMENT_PATTERN},
        ),
    ] = None,
    until: Annotated[
        str | None,
        Query(
            description="active at or before (RFC3339 or Unix; default: now)",
            json_schema_extra={"pattern": MOMENT_PATTERN},
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> FindingListOut:
    now = svc.runtime.clock()
    start = parse_time("since", since) if since is not None else now - svc.runtime.settings.findings.recent
    end = parse_time("until", until) if until is not None else None
    labels = _labels(label)
    if labels is None:
        return FindingListOut(findings=[], count=0, truncated=False, since=start, until=end)
    found = svc.store.findings(FindingQuery(STATES[state], symptom, cause, labels, start, end, limit + 1))
    items = [finding_out(f) for f in found[:limit]]
    return FindingListOut(findings=items, count=len(items), truncated=len(found) > limit, since=start, until=end)


def _labels(filters: list[str]) -> dict[str, str] | None:
    """The filters as one label set, each read as a scope item; None when two ask one label for
    different values: no finding has both, so the list is empty (as Prometheus answers a selector
    with `a="1", a="2"`), not a refusal of filters the schema allows."""
    labels: dict[str, str] = {}
    for item in filters:
        [(name, value)] = Scope.parse([item]).as_dict().items()
        if labels.setdefault(name, value) != value:
            return None
    return labels


@router.get(
    "/findings/{finding_id}",
    operation_id="getFinding",
    summary="One finding (its latest episode, with evidence) and its earlier episodes",
    responses={404: {"model": ErrorOut}},
)
async def get_finding(
    finding_id: Annotated[str, Path(description="the finding's fingerprint, as in /findings")], svc: ServicesDep
) -> FindingDetailOut:
    episodes = svc.store.episodes(finding_id)
    if not episodes:
        raise FindingNotFound(finding_id)
    return finding_detail(episodes[0], episodes[1:])
