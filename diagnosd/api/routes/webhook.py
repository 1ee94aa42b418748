"""POST /webhook/alertmanager: takes an Alertmanager delivery, answers 202 once its new alert states
are recorded, and leaves the diagnoses to the inbox's workers (it never awaits one). While the
inbox's backlog is over its bound it answers 503 with Retry-After, so that Alertmanager retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from enum import StrEnum
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from diagnosd.api import body
from diagnosd.api.deps import ServicesDep
from diagnosd.api.schemas import ErrorOut, Payload, ReceiptOut, SkippedOut
from diagnosd.daemon.alertmanager import payload as alerts
from diagnosd.daemon.alertmanager.inbox import Offer
from diagnosd.errors import QueueFull, RequestError, Unauthorized
from diagnosd.sinks.metrics import Metrics

log = logging.getLogger(__name__)


class Refused(StrEnum):
    """Why a delivery never reached the handler: the `outcome` of diagnosd_webhook_deliveries."""

    MALFORMED = "malformed"
    UNAUTHORIZED = "unauthorized"
    QUEUE_FULL = "queue_full"


class Taken(StrEnum):
    """What became of a delivery, and of each alert in it, that the handler took."""

    ACCEPTED = "accepted"
    QUEUED = "queued"
    DUPLICATE = "duplicate"


class IntakeRoute(APIRoute):
    """The webhook's route, served without FastAPI's per-request dependency solving and body
    decoding: a storm is thousands of deliveries a second, and those two were most of each one's
    CPU (docs/benchmarks.md). The handler checks the webhook's credentials before it reads the
    body, has pydantic-core parse the bytes straight into `Payload` (api/body.py, which fails as
    FastAPI does), calls the endpoint with the live services and writes its receipt. It counts every
    delivery by outcome, refused ones included. FastAPI still describes the route from the
    endpoint's signature, which therefore may take only what this handler passes it."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        taken = {param.name for param in self.dependant.body_params} | {
            dependency.name for dependency in self.dependant.dependencies
        }
        if taken != {"payload", "svc"} or self.dependant.query_params or self.dependant.header_params:
            raise TypeError(f"{path}: the endpoint may take only (payload: Payload, svc: ServicesDep)")

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint, status = self.endpoint, self.status_code or 202

        async def handle(request: Request) -> Response:
            state = request.app.state
            outcome: Refused | None = None
            try:
                state.credentials.check_webhook(request.headers.get("authorization"))
                payload = await body.read(request, Payload)
                receipt: ReceiptOut = await endpoint(payload=payload, svc=state.services)
            except (RequestValidationError, RequestError):
                outcome = Refused.MALFORMED
                raise
            except HTTPException as error:
                # A body that cannot be decoded at all (not UTF-8, nested too deeply) is a 400 here.
                outcome = Refused.MALFORMED if error.status_code == 400 else None
                raise
            except Unauthorized:
                outcome = Refused.UNAUTHORIZED
                raise
            except QueueFull:
                outcome = Refused.QUEUE_FULL
                raise
            finally:
                if outcome is not None:
                    state.services.metrics.deliveries.labels(outcome).inc()
            return Response(receipt.model_dump_json(), status_code=status, media_type="application/json")

        return handle


router = APIRouter(tags=["webhook"], route_class=IntakeRoute)


@router.post(
    "/webhook/alertmanager",
    operation_id="receiveAlertmanagerWebhook",
    summary="Alertmanager webhook (payload version 4): queue each new alert state for diagnosis",
    status_code=202,
    responses={
        400: {"model": ErrorOut},
        401: {"model": ErrorOut},
        413: {"model": ErrorOut},
        422: {"model": ErrorOut},
        503: {"model": ErrorOut},
    },
)
async def receive(payload: Payload, svc: ServicesDep) -> ReceiptOut:
    """Takes the delivery's new alert states (IntakeRoute has checked the credentials and read the
    body). A coroutine that awaits nothing: the inbox records the states and queues the jobs."""
    alerts.check_version(payload)
    hook = svc.runtime.settings.webhook
    trees = svc.diagnoser.ruleset.trees
    plan = alerts.plan(payload, trees, hook.alertname_map, hook.scope_labels, svc.runtime.clock())
    offer = svc.inbox.offer(plan.jobs)
    _count(svc.metrics, plan, offer)
    if payload.truncatedAlerts:
        log.warning("delivery %s: Alertmanager truncated %d alerts", payload.groupKey, payload.truncatedAlerts)
    return ReceiptOut(
        queued=len(offer.queued),
        duplicates=len(offer.duplicates),
        skipped=[SkippedOut(**vars(s)) for s in plan.skipped],
        truncated_alerts=payload.truncatedAlerts,
    )


def _count(metrics: Metrics, plan: alerts.Plan, offer: Offer) -> None:
    metrics.deliveries.labels(Taken.ACCEPTED if offer.queued or not offer.duplicates else Taken.DUPLICATE).inc()
    for outcome, count in ((Taken.QUEUED, len(offer.queued)), (Taken.DUPLICATE, len(offer.duplicates))):
        if count:
            metrics.alerts.labels(outcome).inc(count)
    for skipped in plan.skipped:
        metrics.alerts.labels(str(skipped.reason)).inc()
