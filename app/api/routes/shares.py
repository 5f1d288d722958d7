"""A session's read-only share links (spec 18): make one, list them, revoke one (a key with the share scope, or
admin)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response

from app.api.docs.openapi import SESSION_ID
from app.api.routing.calling import body_of, json_response, key_of, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.requests import SHARE
from app.api.wire.schemas import ShareCreated, ShareList
from app.domain.access import Scope
from app.domain.errors import ErrorCode
from app.domain.sharing import DEFAULT_EXPIRES_IN, LIVE, ShareRecord, expires_in_ms, redaction_names

__all__ = ["SHARE_PAGE", "router", "share_json"]

router = new_router()

# Where a browser shows a share (the session browser's read-only page).
SHARE_PAGE = "/ui/shared/"


def share_json(share: ShareRecord) -> dict[str, Any]:
    """A share as its session's owner sees it: never its token (only its digest is kept)."""
    return {
        "id": share.id,
        "sessionId": share.session_id,
        "upTo": LIVE if share.up_to is None else share.up_to,
        "expiresAt": share.expires_at,
        "redact": redaction_names(share.redact),
        "createdAt": share.created_at,
    }


@router.declare(
    RouteSpec(
        "POST",
        "/sessions/{id}/shares",
        Scope.SHARE,
        body=SHARE,
        refusals=(*SESSION_ID, ErrorCode.NOT_AT_TURN_BOUNDARY, ErrorCode.INVALID_BOUNDARY),
        tag="sharing",
    ),
    ShareCreated,
    status_code=201,
    summary="Make a read-only share link of the session (its token is shown once)",
)
async def create_share(request: Request) -> Response:
    key = key_of(request)
    members = SHARE.parse(await body_of(request, empty_is_object=True))
    up_to = members["upTo"] if members["upTo"] is not None else "head"
    expires_in = members["expiresIn"] if members["expiresIn"] is not None else expires_in_ms(DEFAULT_EXPIRES_IN)
    redact = members["redact"] if members["redact"] is not None else frozenset()
    share, token = await service_of(request).shares.make(key, up_to, expires_in, redact)
    base = str(request.base_url).rstrip("/")
    answer = {**share_json(share), "token": token, "url": f"{base}{SHARE_PAGE}{token}"}
    return json_response(orjson.dumps(answer), 201)


@router.declare(
    RouteSpec("GET", "/sessions/{id}/shares", Scope.SHARE, refusals=SESSION_ID, tag="sharing"),
    ShareList,
    summary="The session's share links in force (without their tokens)",
)
async def list_shares(request: Request) -> Response:
    key = key_of(request)
    shares = await service_of(request).shares.of_session(key)
    return json_response(orjson.dumps({"items": [share_json(share) for share in shares]}))


@router.declare(
    RouteSpec(
        "DELETE",
        "/sessions/{id}/shares/{shareId}",
        Scope.SHARE,
        refusals=(*SESSION_ID, ErrorCode.SHARE_NOT_FOUND),
        tag="sharing",
    ),
    status_code=204,
    response_class=Response,
    summary="Revoke a share link: it leads nowhere from now on, and its open streams end",
)
async def revoke_share(request: Request) -> Response:
    key = key_of(request)
    await service_of(request).shares.revoke(key, request.path_params["shareId"])
    return Response(status_code=204)
