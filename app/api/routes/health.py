"""Liveness and readiness."""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from app.api.route_table import RouteSpec
from app.api.routing import is_admin, json_response, new_router, service_of
from app.api.schemas import Health, Ready
from app.domain.errors import ErrorCode

__all__ = ["router"]

router = new_router()


@router.declare(
    RouteSpec("GET", "/healthz", None, store=False), Health, summary="Liveness: always ok while the process serves"
)
async def healthz(request: Request) -> Response:
    return json_response(b'{"status":"ok"}')


# A store that cannot be reached makes the service not ready (NOT_READY), never a STORAGE_UNAVAILABLE of its own.
@router.declare(
    RouteSpec("GET", "/readyz", None, store=False, refusals=(ErrorCode.NOT_READY,)), Ready, summary="Readiness"
)
async def readyz(request: Request) -> Response:
    readiness = await service_of(request).readiness()
    if not is_admin(request):
        # Counts over every tenant would let one tenant watch another's activity: only an admin key sees them.
        return json_response(b'{"status":"ready"}')
    corrupt = [
        {"id": item.id, "tenant": item.tenant, "path": item.path, "reason": item.reason} for item in readiness.corrupt
    ]
    answer = {"status": "ready", "sessions": readiness.sessions, "corrupt": corrupt}
    return json_response(orjson.dumps(answer))
