"""GET /metrics: findings re-exported and self-metrics, in the Prometheus text format.

Always the text format, whatever the scraper accepts: prometheus-client 0.23+ would otherwise
rewrite names for OpenMetrics (client_python#1177).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from diagnosd.api.deps import ServicesDep, require_api
from diagnosd.api.schemas import UNAUTHORIZED

router = APIRouter(tags=["metrics"], dependencies=[Depends(require_api)], responses=UNAUTHORIZED)


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics: diagnosd_root_cause, diagnosd_symptom_active, diagnosd_check_value, self",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics(svc: ServicesDep) -> Response:
    return Response(generate_latest(svc.runtime.registry), media_type=CONTENT_TYPE_LATEST)
