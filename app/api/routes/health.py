"""Liveness and readiness."""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from app.api.routing.calling import is_admin, json_response, key_in_force, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.schemas import Health, Ready
from app.domain.errors import ErrorCode

__all__ = ["router"]

router = new_router()


@router.declare(
    RouteSpec("GET", "/healthz", None, store=False), Health, summary="Liveness: always ok while the process serves"
)
async def healthz(request: Request) -> Response:
    return json_response(b'{"status":"ok"}')


# A store that cannot be reached makes the service not ready (NOT_READY), never a STORAGE_UNAVAILABLE of its own.
# Counts over every tenant, and the corrupt list's paths, would let one tenant watch another's activity (spec 9):
# an admin key sees them; another key the counts of its own tenant; a caller without a key in force, no counts.
@router.declare(
    RouteSpec("GET", "/readyz", None, store=False, refusals=(ErrorCode.NOT_READY,)), Ready, summary="Readiness"
)
async def readyz(request: Request) -> Response:
    service = service_of(request)
    if is_admin(request):
        readiness = await service.readiness()
        corrupt = [
            {"id": item.id, "tenant": item.tenant, "path": item.path, "reason": item.reason}
            for item in readiness.corrupt
        ]
        return json_response(orjson.dumps({"status": "ready", "sessions": readiness.sessions, "corrupt": corrupt}))
    key = key_in_force(request)
    if key is None:
        await service.readiness()  # not ready is still 503 NOT_READY to a keyless caller
        return json_response(b'{"status":"ready"}')
    own = await service.readiness(key.tenant)
    return json_response(orjson.dumps({"status": "ready", "sessions": own.sessions, "corrupt": len(own.corrupt)}))
