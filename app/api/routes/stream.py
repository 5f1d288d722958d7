"""The live tail (spec 7): a session's events as server-sent events, from a seq on and then as they are stored.

The stream is sse-starlette's ``EventSourceResponse``: its ``ServerSentEvent`` frames every event, and it sends a
``: ping`` comment every :data:`PING_SECONDS` and stops at a disconnect. Everything that can go wrong is checked
before the response starts, so a refusal is a problem answer, never a stream cut short. The events of one read of
the log go out as one write (their frames joined), not one write each: the cost of a frame is then its encoding, and
a reader that catches up or follows a busy session costs a fraction of what one socket write per event costs. A
reader that falls behind costs one batch of events: the tail reads the log at its own cursor, and the connection's
flow control holds the rest. A stream whose key is removed from the keys file (or loses ``read``) ends: no event
stored after that reaches it (:mod:`app.api.edge.keys_in_force`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from fastapi import Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse, ServerSentEvent

from app.api.docs.openapi import SESSION_ID
from app.api.edge.keys_in_force import still_allowed
from app.api.routing.calling import key_of, new_router, service_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.requests import STREAM_QUERY, last_event_id
from app.domain.access import Scope
from app.domain.errors import ErrorCode
from app.service.sessions import Deleted, TailEvents

__all__ = ["PING_SECONDS", "router"]

PING_SECONDS = 15.0  # spec 7: a comment line at least every 15 s

router = new_router()


async def frames(tail: AsyncIterator[TailEvents | Deleted]) -> AsyncIterator[bytes]:
    async for item in tail:
        if isinstance(item, Deleted):
            yield ServerSentEvent(event="deleted", data=orjson.dumps({"id": item.id}).decode()).encode()
            return
        seq = item.first_seq
        framed = []
        for line in item.lines.splitlines():
            framed.append(ServerSentEvent(id=str(seq), data=line.decode()).encode())
            seq += 1
        yield b"".join(framed)


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping")


@router.declare(
    RouteSpec(
        "GET",
        "/sessions/{id}/events/stream",
        Scope.READ,
        query=STREAM_QUERY,
        refusals=(*SESSION_ID, ErrorCode.SESSION_NOT_LIVE),
        stream=True,
        standby_reads=True,
    ),
    response_class=EventSourceResponse,
    summary="Follow the log live (server-sent events): every event from a seq, then each new one",
)
async def stream_events(request: Request) -> Response:
    key = key_of(request)
    query = STREAM_QUERY.parse(request.query_params)
    resume = last_event_id(request.headers.get("last-event-id"))
    tail = await service_of(request).reads.tail(
        key,
        start=query["from"],
        last_event_id=resume,
        instance=query["instance"],
        allowed=still_allowed(request, Scope.READ),
    )
    return EventSourceResponse(
        frames(tail), ping=PING_SECONDS, ping_message_factory=_ping, headers={"Cache-Control": "no-cache"}
    )
