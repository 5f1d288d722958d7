"""A session's log: append events, read them."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from app.api.docs.openapi import SESSION_ID
from app.api.edge.keys_in_force import revoked_answer, still_allowed
from app.api.routing.calling import body_of, json_response, key_of, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.idempotency_key import answer_response, idempotent_request
from app.api.wire.requests import APPEND, READ_QUERY
from app.api.wire.resources import json_array
from app.api.wire.schemas import AppendResponse, EventsPage
from app.domain.access import Scope
from app.domain.errors import ErrorCode

__all__ = ["APPEND_EVENTS", "READ_EVENTS", "router"]

APPEND_EVENTS = RouteSpec(
    "POST",
    "/sessions/{id}/events",
    Scope.WRITE,
    body=APPEND,
    refusals=(
        *SESSION_ID,
        ErrorCode.SESSION_NOT_LIVE,
        ErrorCode.SEQ_CONFLICT,
        ErrorCode.INVALID_EVENT,
        ErrorCode.QUOTA_EXCEEDED,
    ),
    idempotent=True,
)
READ_EVENTS = RouteSpec(
    "GET", "/sessions/{id}/events", Scope.READ, query=READ_QUERY, refusals=SESSION_ID, standby_reads=True
)

router = new_router()


@router.declare(
    APPEND_EVENTS, AppendResponse, status_code=201, summary="Append events (atomically: all are stored, or none)"
)
async def append_events(request: Request) -> Response:
    key = key_of(request)
    body = await body_of(request, empty_is_object=False)
    members = APPEND.parse(body)
    service = service_of(request)

    answer, replayed = await service.idempotently(
        idempotent_request(request, key.tenant, body.raw),
        lambda change: service.append(
            key,
            members["events"],
            expected_seq=members["expectedSeq"],
            instance=members["instance"],
            breaks=body.element_breaks("events"),
            change=change,
        ),
    )
    return answer_response(answer, replayed)


@router.declare(READ_EVENTS, EventsPage, summary="Read the log")
async def read_events(request: Request) -> Response:
    key = key_of(request)
    query = READ_QUERY.parse(request.query_params)
    start = query["from"]
    wait_ms = query["waitMs"]
    allowed = still_allowed(request, Scope.READ)
    lines, count = await service_of(request).reads.read(key, start, query["limit"], wait_ms=wait_ms, allowed=allowed)
    if wait_ms and not allowed():  # a long-poll whose key was removed while it waited (spec 9)
        return revoked_answer(request, Scope.READ)
    next_seq = start + lines.count(b"\n")
    return json_response(b'{"events":' + json_array(lines) + b',"nextSeq":%d,"eventCount":%d}' % (next_seq, count))
