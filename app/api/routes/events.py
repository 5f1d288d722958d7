"""A session's log: append events, read them, and the whole DSH log as a file (raw ``.jsonl`` or ``.jsonl.zstd``)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from app.api.docs.openapi import SESSION_ID
from app.api.edge.keys_in_force import revoked_answer, still_allowed
from app.api.routing.calling import body_of, json_response, key_of, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.accept import preferred
from app.api.wire.idempotency_key import answer_response, idempotent_request
from app.api.wire.requests import APPEND, READ_QUERY
from app.api.wire.resources import json_array
from app.api.wire.schemas import AppendResponse, EventsPage
from app.domain.access import Scope
from app.domain.errors import ErrorCode
from app.service.transfer.dsh_log import LogEncoding

__all__ = ["APPEND_EVENTS", "LOG_MEDIA_TYPES", "READ_EVENTS", "READ_LOG", "router"]

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
READ_LOG = RouteSpec("GET", "/sessions/{id}/log", Scope.READ, refusals=SESSION_ID)

# What GET /sessions/{id}/log answers, by the encoding of the log (spec 16); the first is the default.
LOG_MEDIA_TYPES: dict[str, LogEncoding] = {"application/x-ndjson": "none", "application/zstd": "zstd"}
_LOG_ANSWER = {
    "description": (
        "the session's DSH log as `forklog export` writes it: the header line, then every stored line "
        "(application/x-ndjson), or DSH's .jsonl.zstd of those lines (application/zstd, when Accept asks for it)"
    ),
    "content": {
        "application/x-ndjson": {"schema": {"type": "string", "description": "JSONL: one record a line"}},
        "application/zstd": {
            "schema": {"type": "string", "format": "binary", "description": "Zstandard frames (RFC 8878)"}
        },
    },
}

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


@router.declare(
    READ_LOG,
    summary="The session's DSH log as a file: raw JSONL, or .jsonl.zstd on Accept: application/zstd",
    response_class=StreamingResponse,
    responses={200: _LOG_ANSWER},
)
async def read_log(request: Request) -> Response:
    key = key_of(request)
    media_type = preferred(request.headers.get("accept"), list(LOG_MEDIA_TYPES))
    pieces = await service_of(request).reads.log(key, LOG_MEDIA_TYPES[media_type])
    # Streamed a piece at a time: a large log is never built whole, here or in the store.
    return StreamingResponse(pieces, media_type=media_type, headers={"Vary": "Accept"})
