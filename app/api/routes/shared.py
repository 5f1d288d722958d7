"""A share link's reads (spec 18), with no key: the session as shared, its events, its model history and, for a live
share, its live tail; and its continuation into the caller's own tenant (a key with the write scope).

Every token that leads nowhere answers the same ``404 SHARE_NOT_FOUND`` (:class:`~app.service.shares.ShareNotFound`);
the token never reaches a log line, a metric, a trace or a problem body (:mod:`app.api.wire.share_paths`).
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.routes.stream import PING_SECONDS, frames
from app.api.routing.calling import body_of, json_response, new_router, service_of, tenant_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.requests import SHARED_FORK, SHARED_READ_QUERY, SHARED_STREAM_QUERY, last_event_id
from app.api.wire.resources import json_array, session_json
from app.api.wire.schemas import EventsPage, History, SessionOut, SharedSession
from app.domain.access import Scope
from app.domain.errors import ErrorCode
from app.domain.jsonvalue import dumps
from app.domain.session import HEADER_FIELDS
from app.domain.sharing import Redaction
from app.service.shares import SharedView

__all__ = ["router", "shared_session_json"]

router = new_router()

# What every share read can answer of its own: a token that leads nowhere, and the per-address rate (spec 18).
_SHARED = (ErrorCode.SHARE_NOT_FOUND, ErrorCode.RATE_LIMITED)
# The header members a share never shows, and those "meta" hides (every one but createdAt; title is not a header's).
_NEVER_SHOWN = ("id", "instance", "parentSession")
_META_MEMBERS = tuple(field.key for field in HEADER_FIELDS if field.key != "parentSession")


def shared_session_json(view: SharedView) -> dict[str, Any]:
    """The Session resource as the share shows it: its head that of what is shared, no id, instance or parent, a
    redacted header member null."""
    resource = session_json(view.shown)
    for member in _NEVER_SHOWN:
        del resource[member]
    redact = view.share.redact
    if Redaction.META in redact:
        for member in _META_MEMBERS:
            resource[member] = 0 if member == "delegationDepth" else None
    if Redaction.CWD in redact:
        resource["cwd"] = None
    return resource


def _answer(content: bytes, status: int = 200) -> Response:
    """A share's answer: never kept by a cache on the way (a revoke must be in force at the next read)."""
    response = json_response(content, status)
    response.headers["Cache-Control"] = "no-store"
    return response


def _token(request: Request) -> str:
    token: str = request.path_params["token"]
    return token


@router.declare(
    RouteSpec("GET", "/shared/{token}", None, refusals=_SHARED, tag="sharing", standby_reads=True),
    SharedSession,
    summary="A shared session, as its share shows it (no key)",
)
async def get_shared(request: Request) -> Response:
    view = await service_of(request).shares.open(_token(request))
    return _answer(orjson.dumps(shared_session_json(view)))


@router.declare(
    RouteSpec(
        "GET",
        "/shared/{token}/events",
        None,
        query=SHARED_READ_QUERY,
        refusals=_SHARED,
        tag="sharing",
        standby_reads=True,
    ),
    EventsPage,
    summary="A page of a shared session's events, redacted as shared (no key)",
)
async def read_shared_events(request: Request) -> Response:
    query = SHARED_READ_QUERY.parse(request.query_params)
    start = query["from"]
    lines, count = await service_of(request).shares.read(
        _token(request), start, query["limit"], wait_ms=query["waitMs"]
    )
    next_seq = start + lines.count(b"\n")
    return _answer(b'{"events":' + json_array(lines) + b',"nextSeq":%d,"eventCount":%d}' % (next_seq, count))


@router.declare(
    RouteSpec("GET", "/shared/{token}/history", None, refusals=_SHARED, tag="sharing", standby_reads=True),
    History,
    summary="The model history of a shared session, redacted as shared (no key)",
)
async def read_shared_history(request: Request) -> Response:
    messages, count = await service_of(request).shares.history(_token(request))
    return _answer(dumps({"messages": messages, "eventCount": count}))


@router.declare(
    RouteSpec(
        "GET",
        "/shared/{token}/events/stream",
        None,
        query=SHARED_STREAM_QUERY,
        refusals=(*_SHARED, ErrorCode.SHARE_NOT_LIVE),
        stream=True,
        tag="sharing",
    ),
    response_class=EventSourceResponse,
    summary="Follow a live share (server-sent events, redacted as shared; no key); it ends when the share does",
)
async def stream_shared_events(request: Request) -> Response:
    query = SHARED_STREAM_QUERY.parse(request.query_params)
    resume = last_event_id(request.headers.get("last-event-id"))
    tail = await service_of(request).shares.tail(_token(request), start=query["from"], last_event_id=resume)
    return EventSourceResponse(
        frames(tail), ping=PING_SECONDS, ping_message_factory=_ping, headers={"Cache-Control": "no-cache"}
    )


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping")


@router.declare(
    RouteSpec(
        "POST",
        "/shared/{token}/fork",
        Scope.WRITE,
        body=SHARED_FORK,
        refusals=(*_SHARED, ErrorCode.NOT_AT_TURN_BOUNDARY, ErrorCode.QUOTA_EXCEEDED),
        created=True,
        tag="sharing",
    ),
    SessionOut,
    status_code=201,
    summary="Continue a share in a new session of the caller's tenant (redacted content stays redacted)",
)
async def fork_shared(request: Request) -> Response:
    SHARED_FORK.parse(await body_of(request, empty_is_object=True))
    made = await service_of(request).shares.fork(_token(request), tenant_of(request))
    response = json_response(orjson.dumps(session_json(made)), 201)
    response.headers["Location"] = f"/sessions/{made.id}"
    return response
