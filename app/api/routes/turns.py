"""A session's turn lifecycle (spec 17): interrupt the open turn of a session whose writer is gone."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from app.api.docs.openapi import SESSION_ID
from app.api.routing.calling import body_of, key_of, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.idempotency_key import answer_response, idempotent_request
from app.api.wire.requests import INTERRUPT
from app.api.wire.schemas import AppendResponse
from app.domain.access import Scope
from app.domain.errors import ErrorCode

__all__ = ["INTERRUPT_TURN", "router"]

INTERRUPT_TURN = RouteSpec(
    "POST",
    "/sessions/{id}/interrupt",
    Scope.WRITE,
    body=INTERRUPT,
    refusals=(
        *SESSION_ID,
        ErrorCode.SESSION_NOT_LIVE,
        ErrorCode.SEQ_CONFLICT,
        ErrorCode.NOT_IN_TURN,
        ErrorCode.INVALID_EVENT,
        ErrorCode.QUOTA_EXCEEDED,
    ),
    idempotent=True,
)

router = new_router()


@router.declare(
    INTERRUPT_TURN,
    AppendResponse,
    status_code=201,
    summary="Close the open turn as DSH closes an abandoned one (its closers appended as one atomic batch)",
)
async def interrupt_turn(request: Request) -> Response:
    key = key_of(request)
    body = await body_of(request, empty_is_object=True)
    members = INTERRUPT.parse(body)
    service = service_of(request)
    answer, replayed = await service.idempotently(
        idempotent_request(request, key.tenant, body.raw),
        lambda change: service.interrupt(
            key, expected_seq=members["expectedSeq"], instance=members["instance"], change=change
        ),
    )
    return answer_response(answer, replayed)
