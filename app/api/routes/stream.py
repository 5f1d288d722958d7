"""The live tail (spec 7): a session's events as server-sent events, from a seq on and then as they are stored.

The stream is FastAPI's own SSE support (``EventSourceResponse``: framing, and a ``: ping`` comment every 15 s while
nothing happens). Everything that can go wrong is checked by a dependency before the stream starts, so a refusal is a
problem answer, never a stream cut short. A reader that falls behind costs one batch of events: the tail reads the
log at its own cursor, and FastAPI's SSE buffer and the connection's flow control hold the rest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from app.api.openapi import operation
from app.api.requests import STREAM_QUERY, last_event_id
from app.api.routing import key_of, service_of
from app.service.sessions import Deleted, TailEvents

__all__ = ["router"]

router = APIRouter(generate_unique_id_function=lambda route: route.name)

Tail = AsyncIterator[TailEvents | Deleted]


async def open_tail(request: Request) -> Tail:
    """The tail the request asks for, or the problem that refuses it (before the stream starts)."""
    key = key_of(request)
    query = STREAM_QUERY.parse(request.query_params)
    resume = last_event_id(request.headers.get("last-event-id"))
    return await service_of(request).tail(key, start=query["from"], last_event_id=resume, instance=query["instance"])


@router.get(
    "/sessions/{id}/events/stream",
    response_class=EventSourceResponse,
    summary="Follow the log live (server-sent events): every event from a seq, then each new one",
    **operation(None, query=STREAM_QUERY, problems=(404, 409, 422, 503), stream=True),
)
async def stream_events(tail: Annotated[Tail, Depends(open_tail)]) -> AsyncIterator[ServerSentEvent]:
    async for item in tail:
        if isinstance(item, Deleted):
            yield ServerSentEvent(event="deleted", raw_data=orjson.dumps({"id": item.id}).decode())
            return
        for offset, line in enumerate(item.lines.splitlines()):
            yield ServerSentEvent(id=str(item.first_seq + offset), raw_data=line.decode())
