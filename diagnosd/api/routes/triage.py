"""GET /triage: every symptom at once for the whole fleet (or a scope), worst first; JSON or text.

Ad hoc, like /diagnose: answered, not recorded as findings. Cost: one detect query per tree (plus
its baseline), then a full tree walk only for the symptoms present somewhere; never per target.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from diagnosd.api.deps import AtDep, ScopeDep, ServicesDep, require_api
from diagnosd.api.schemas import UNAUTHORIZED, CheckOut, ErrorOut, EvidenceOut, RootCauseOut, TextOut, Wire
from diagnosd.render import triage as render_triage

router = APIRouter(tags=["diagnose"], dependencies=[Depends(require_api)], responses=UNAUTHORIZED)

DESCRIPTION = """Every query parameter other than `at`, `format` and `lang` narrows the scope as
`label=value` (e.g. `?namespace=prod`); `match=label=value` (repeatable) scopes a label whose name
is one of those words. Values are never pasted into PromQL.

`present` is worst first (severity of the top cause, then number of targets); `clear` lists the
symptoms ruled out on every target seen; `unknown` those that could not be looked at, with why
(`exporter_absent`, `metric_absent`, `no_data`, `no_baseline`, `query_error`, `timeout`,
`unreachable`...). No baseline yet is never clear.

503: Prometheus could not be reached, so nothing was looked at (never reported as "no problem")."""


class UnseenOut(Wire):
    reason: str
    detail: str
    targets: int


class HitOut(Wire):
    labels: dict[str, str]
    cause: RootCauseOut | None
    evidence: EvidenceOut | None
    detect: CheckOut


class PresentOut(Wire):
    symptom: str
    title: TextOut
    severity: str | None
    targets: int
    seen: int
    target_labels: list[str]
    queries: int
    hits: list[HitOut]
    unknown: list[UnseenOut]


class ClearOut(Wire):
    symptom: str
    title: TextOut
    targets: int


class UnknownOut(Wire):
    symptom: str
    title: TextOut
    clear: int
    reasons: list[UnseenOut]


class TriageOut(Wire):
    evaluated_at: str
    scope: dict[str, str]
    found: bool
    queries: int
    targets: int
    present: list[PresentOut]
    clear: list[ClearOut]
    unknown: list[UnknownOut]


@router.get(
    "/triage",
    operation_id="triage",
    summary="Triage every symptom",
    description=DESCRIPTION,
    response_model=TriageOut,
    responses={
        200: {"content": {"text/plain": {}}},
        400: {"model": ErrorOut},
        502: {"model": ErrorOut},
        503: {"model": ErrorOut},
        504: {"model": ErrorOut},
    },
)
async def triage(
    scope: ScopeDep,
    at: AtDep,
    svc: ServicesDep,
    format: Annotated[Literal["json", "text"], Query(description="json (default) or the text board")] = "json",
    lang: Annotated[Literal["en", "zh"], Query(description="language of the text board")] = "en",
) -> Response:
    board = await svc.diagnoser.triage(scope, at)
    if format == "text":
        return PlainTextResponse(render_triage.render(board, lang))
    return JSONResponse(render_triage.board(board))
