"""A session's model history (spec 1.3)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from app.api.docs.openapi import SESSION_ID
from app.api.routing.calling import json_response, key_of, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.requests import HISTORY_QUERY
from app.api.wire.schemas import History
from app.domain.access import Scope
from app.domain.errors import ErrorCode
from app.domain.jsonvalue import dumps

__all__ = ["router"]

router = new_router()


@router.declare(
    RouteSpec(
        "GET",
        "/sessions/{id}/history",
        Scope.READ,
        query=HISTORY_QUERY,
        refusals=(*SESSION_ID, ErrorCode.INVALID_BOUNDARY),
        standby_reads=True,
    ),
    History,
    summary="The model history, now or at a turn/end",
)
async def read_history(request: Request) -> Response:
    key = key_of(request)
    at_seq = HISTORY_QUERY.parse(request.query_params)["atSeq"]
    messages, count = await service_of(request).reads.history(key, at_seq)
    return json_response(dumps({"messages": messages, "eventCount": count}))
