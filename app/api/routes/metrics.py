"""``GET /metrics``: the Prometheus exposition of :mod:`app.api.telemetry.metrics` (spec 13); the ``admin`` scope with a
keys file, open without one; ``404 NOT_FOUND`` when metrics are off (``FORKLOG_METRICS=false``)."""

from __future__ import annotations

import contextlib

from fastapi import Request
from fastapi.responses import PlainTextResponse, Response

from app.api.routing.calling import new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.telemetry.metrics import Metrics
from app.api.wire.problems import RequestProblem
from app.backends.errors import StorageError
from app.domain.access import Scope
from app.domain.errors import ErrorCode
from app.service.errors import NotReady

__all__ = ["METRICS_PATH", "router"]

METRICS_PATH = "/metrics"

router = new_router()

# Spec 13: counts over every tenant are for operators.
_METRICS = RouteSpec("GET", METRICS_PATH, Scope.ADMIN, store=False, refusals=(ErrorCode.NOT_FOUND,), tag="operations")
_EXPOSITION = {
    "description": "the Prometheus text exposition format (OpenMetrics when the Accept header asks for it)",
    "content": {"text/plain": {"schema": {"type": "string"}}},
}


@router.declare(
    _METRICS,
    response_class=PlainTextResponse,
    summary="Metrics for Prometheus (admin scope)",
    responses={200: _EXPOSITION},
)
async def metrics(request: Request) -> Response:
    kept: Metrics | None = request.app.state.metrics
    if kept is None:
        raise RequestProblem(ErrorCode.NOT_FOUND, "metrics are off here (FORKLOG_METRICS=false)")
    live: int | None = None
    with contextlib.suppress(NotReady, StorageError):  # a store not (yet) reachable leaves the last count
        live = (await service_of(request).readiness()).sessions
    body, content_type = kept.exposition(request.headers.get("accept"), live_sessions=live)
    return Response(body, media_type=content_type)
