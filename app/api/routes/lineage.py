"""A session's family (spec 7): its ancestors while they are live, and its children."""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from app.api.docs.openapi import SESSION_ID
from app.api.routing.calling import json_response, key_of, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.resources import session_json
from app.api.wire.schemas import Lineage
from app.domain.access import Scope

__all__ = ["router"]

router = new_router()


@router.declare(
    RouteSpec("GET", "/sessions/{id}/lineage", Scope.READ, refusals=SESSION_ID, standby_reads=True),
    Lineage,
    summary="Ancestors (while each parent is live) and children of a session",
)
async def read_lineage(request: Request) -> Response:
    lineage = await service_of(request).reads.lineage(key_of(request))
    return json_response(
        orjson.dumps(
            {
                "ancestors": [session_json(session) for session in lineage.ancestors],
                "children": [session_json(session) for session in lineage.children],
                "missingAncestor": lineage.missing_ancestor,
            }
        )
    )
