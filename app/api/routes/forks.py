"""The RFC's snapshot and fork, at a turn boundary."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from app.api.docs.openapi import SESSION_ID
from app.api.routing.calling import body_of, key_of, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.idempotency_key import answer_response, idempotent_request
from app.api.wire.problems import invalid_request
from app.api.wire.requests import FORK, FORK_BOUNDARIES, SNAPSHOT
from app.api.wire.resources import json_array_pieces, session_json
from app.api.wire.schemas import SessionOut, SnapshotOut
from app.domain.access import Scope
from app.domain.errors import ErrorCode

__all__ = ["router"]

router = new_router()

# What a snapshot and a fork refuse of their source, in the check order of spec 2.3.
_BOUNDARY_REFUSALS = (
    ErrorCode.SESSION_NOT_LIVE,
    ErrorCode.SEQ_CONFLICT,
    ErrorCode.INVALID_BOUNDARY,
    ErrorCode.NOT_AT_TURN_BOUNDARY,
)
# A snapshot writes nothing: a read key takes it.
SNAPSHOT_SESSION = RouteSpec(
    "POST", "/sessions/{id}/snapshot", Scope.READ, body=SNAPSHOT, refusals=(*SESSION_ID, *_BOUNDARY_REFUSALS)
)
FORK_SESSION = RouteSpec(
    "POST",
    "/sessions/{id}/fork",
    Scope.WRITE,
    body=FORK,
    refusals=(
        *SESSION_ID,
        ErrorCode.SESSION_ALREADY_EXISTS,
        *_BOUNDARY_REFUSALS,
        ErrorCode.INVALID_EVENT,
        ErrorCode.QUOTA_EXCEEDED,
    ),
    idempotent=True,
    created=True,
)


@router.declare(SNAPSHOT_SESSION, SnapshotOut, summary="The seed and meta a fork would use, at a turn boundary")
async def snapshot_session(request: Request) -> Response:
    key = key_of(request)
    members = SNAPSHOT.parse(await body_of(request, empty_is_object=True))
    snapshot = await service_of(request).forks.snapshot(
        key, at_seq=members["atSeq"], instance=members["instance"], expected_seq=members["expectedSeq"]
    )

    async def pieces() -> AsyncIterator[bytes]:
        # The seed is sent a piece at a time: a large one is never built whole.
        yield b'{"source":' + orjson.dumps(session_json(snapshot.source)) + b',"seed":'
        async for piece in json_array_pieces(snapshot.seed):
            yield piece
        yield b',"meta":' + orjson.dumps(snapshot.meta) + b"}"

    return StreamingResponse(pieces(), media_type="application/json")


@router.declare(
    FORK_SESSION,
    SessionOut,
    status_code=201,
    summary="Create a child session from this one's log, at a turn boundary",
)
async def fork_session(request: Request) -> Response:
    key = key_of(request)
    body = await body_of(request, empty_is_object=True)
    members = FORK.parse(body)
    given = [name for name in FORK_BOUNDARIES if members[name] is not None]
    if len(given) > 1:
        raise invalid_request(given[1], f"give at most one of {', '.join(FORK_BOUNDARIES)}")
    if members["atTurn"] is not None and members["atTurn"] < 0:
        raise invalid_request("atTurn", "must be a turn number, 0 or more")
    if members["atMessageId"] == "":
        raise invalid_request("atMessageId", "must be a message id, not empty")
    service = service_of(request)

    answer, replayed = await service.idempotently(
        idempotent_request(request, key.tenant, body.raw),
        lambda change: service.forks.fork(
            key,
            child_id=members["sessionId"],
            at_seq=members["atSeq"],
            at_turn=members["atTurn"],
            at_message_id=members["atMessageId"],
            events=members["events"],
            breaks=body.element_breaks("events"),
            instance=members["instance"],
            expected_seq=members["expectedSeq"],
            change=change,
        ),
    )
    return answer_response(answer, replayed)
