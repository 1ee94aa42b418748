"""GET /symptoms and /symptoms/{symptom}: the loaded trees, their targets, causes, params and nodes."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from diagnosd.api.deps import ServicesDep, TreeDep, require_api
from diagnosd.api.schemas import UNAUTHORIZED, ErrorOut, SymptomDetailOut, SymptomOut, symptom_detail, symptom_out

router = APIRouter(tags=["symptoms"], dependencies=[Depends(require_api)], responses=UNAUTHORIZED)


@router.get("/symptoms", operation_id="listSymptoms", summary="List the symptoms diagnosd can diagnose")
async def list_symptoms(svc: ServicesDep) -> list[SymptomOut]:
    return [symptom_out(tree) for tree in svc.diagnoser.ruleset.trees.values()]


@router.get(
    "/symptoms/{symptom}",
    operation_id="getSymptom",
    summary="One symptom's tree: params (with this deployment's values) and nodes",
    responses={404: {"model": ErrorOut}},
)
async def get_symptom(tree: TreeDep, svc: ServicesDep) -> SymptomDetailOut:
    return symptom_detail(tree, dict(svc.runtime.settings.params.get(tree.id, {})))
