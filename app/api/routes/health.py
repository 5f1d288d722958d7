"""Liveness and readiness."""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from app.api.openapi import operation
from app.api.routing import json_response, new_router, service_of
from app.api.schemas import Health, Ready

__all__ = ["router"]

router = new_router()


@router.get(
    "/healthz", summary="Liveness: always ok while the process serves", **operation(Health, public=True, store=False)
)
async def healthz(request: Request) -> Response:
    return json_response(b'{"status":"ok"}')


@router.get("/readyz", summary="Readiness", **operation(Ready, public=True))
async def readyz(request: Request) -> Response:
    readiness = await service_of(request).readiness()
    corrupt = [{"id": item.id, "path": item.path, "reason": item.reason} for item in readiness.corrupt]
    return json_response(orjson.dumps({"status": "ready", "sessions": readiness.sessions, "corrupt": corrupt}))
