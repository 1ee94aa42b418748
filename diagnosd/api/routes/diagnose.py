"""GET /diagnose/{symptom}: walk one tree now (or at `at`) for a scope; JSON or the text tree.

Ad hoc: a REST diagnosis is answered, not recorded as findings (rounds and alerts record).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from diagnosd.api.deps import AtDep, ScopeDep, ServicesDep, TreeDep, require_api
from diagnosd.api.schemas import UNAUTHORIZED, DiagnosisOut, ErrorOut
from diagnosd.findings.lifecycle import Trigger
from diagnosd.render import json as render_json
from diagnosd.render import text as render_text

router = APIRouter(tags=["diagnose"], dependencies=[Depends(require_api)], responses=UNAUTHORIZED)

DESCRIPTION = """Every query parameter other than `at`, `format`, `lang` and `verbose` narrows the scope as
`label=value` (e.g. `?namespace=prod&pod=vllm-0`); `match=label=value` (repeatable) scopes a label
whose name is one of those words. Values are never pasted into PromQL.

503: Prometheus could not be reached, so nothing was looked at (never reported as "no problem")."""


@router.get(
    "/diagnose/{symptom}",
    operation_id="diagnose",
    summary="Diagnose a symptom",
    description=DESCRIPTION,
    response_model=DiagnosisOut,
    responses={
        200: {"content": {"text/plain": {}}},
        400: {"model": ErrorOut},
        404: {"model": ErrorOut},
        502: {"model": ErrorOut},
        503: {"model": ErrorOut},
        504: {"model": ErrorOut},
    },
)
async def diagnose(
    tree: TreeDep,
    scope: ScopeDep,
    at: AtDep,
    svc: ServicesDep,
    format: Annotated[Literal["json", "text"], Query(description="json (default) or the text tree")] = "json",
    lang: Annotated[Literal["en", "zh"], Query(description="language of the text tree")] = "en",
    verbose: Annotated[bool, Query(description="text: every target's whole tree, not one line each")] = False,
) -> Response:
    looked = await svc.diagnoser.diagnose(tree, scope, at, Trigger.API)
    if format == "text":
        return PlainTextResponse(render_text.render(looked.diagnosis, lang, verbose=verbose, tree=tree))
    return JSONResponse(render_json.diagnosis(looked.diagnosis))
