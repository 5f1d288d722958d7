"""The routes: parse the request, call one store operation, shape the answer. Nothing else lives here."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse

from app.api.body import (
    JsonBody,
    bounded_query_integer,
    optional_integer,
    optional_string,
    query_integer,
    read_body,
    refuse_unknown_members,
)
from app.api.problems import ApiProblem, invalid_request
from app.api.schemas import (
    AppendRequest,
    AppendResult,
    EventsPage,
    ForkRequest,
    Health,
    History,
    Ready,
    SessionCreate,
    SessionOut,
    SessionPage,
    SnapshotOut,
    SnapshotRequest,
)
from app.domain.jsonvalue import MAX_SAFE_INTEGER, dumps
from app.domain.store import META_KEYS, SessionView, check_id
from app.persistence.durable import DurableStore

router = APIRouter()

MAX_APPEND_EVENTS = 1000
CREATE_MEMBERS = frozenset({"id", "seed", "meta", "source"})
APPEND_MEMBERS = frozenset({"events", "expectedSeq", "instance"})
SNAPSHOT_MEMBERS = frozenset({"instance", "atSeq", "expectedSeq"})
FORK_MEMBERS = SNAPSHOT_MEMBERS | {"sessionId"}


async def _durable(request: Request) -> DurableStore:  # async: FastAPI would run a plain def in a thread
    durable: DurableStore = request.app.state.durable
    return durable


Durable = Annotated[DurableStore, Depends(_durable)]
SessionId = Annotated[str, "the session id (path)"]


async def _read_body(request: Request, *, empty_is_object: bool) -> JsonBody:
    settings = request.app.state.settings
    return await read_body(
        request,
        limit=settings.max_body_bytes,
        empty_is_object=empty_is_object,
        read_timeout=settings.read_timeout,
    )


def _require_ready(durable: DurableStore) -> None:
    if not durable.ready:
        raise ApiProblem("NOT_READY", "the store is still recovering its sessions; retry in a moment")


def _json(content: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(content, status_code=status, media_type="application/json", headers=headers)


def _session_json(view: SessionView) -> bytes:
    return orjson.dumps(view.to_json())


def _created(view: SessionView) -> Response:
    return _json(_session_json(view), 201, {"Location": f"/sessions/{view.id}"})


def _request_body(model: type[Any], *, required: bool = False) -> dict[str, Any]:
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": required, "content": {"application/json": {"schema": schema}}}}


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"description": "a problem (application/problem+json)"} for status in (*statuses, 422, 503)}


async def _boundary_body(
    request: Request, id: str, members: frozenset[str]
) -> tuple[JsonBody, str | None, int | None, int | None]:
    """The body of a snapshot or fork (0 bytes count as ``{}``) and its instance, atSeq and expectedSeq."""
    check_id(id)
    body = await _read_body(request, empty_is_object=True)
    refuse_unknown_members(body, members)
    body.refuse_breaks_outside(None)
    return (
        body,
        optional_string(body, "instance"),
        optional_integer(body, "atSeq"),
        optional_integer(body, "expectedSeq"),
    )


# -- sessions --------------------------------------------------------------------------------------------------------


@router.post(
    "/sessions",
    status_code=201,
    response_model=SessionOut,
    responses=_problems(409, 413, 415),
    openapi_extra=_request_body(SessionCreate),
    summary="Create a session, optionally from a seed (a snapshot response creates the fork's child)",
)
async def create_session(request: Request, durable: Durable) -> Response:
    body = await _read_body(request, empty_is_object=True)
    refuse_unknown_members(body, CREATE_MEMBERS)
    body.refuse_breaks_outside("seed")
    session_id = optional_string(body, "id")
    if session_id is not None:
        check_id(session_id)
    seed = body.members.get("seed")
    if seed is not None and not isinstance(seed, list):
        raise invalid_request("seed", "must be an array of events")
    meta = body.members.get("meta")
    if meta is not None:
        if not isinstance(meta, dict):
            raise invalid_request("meta", "must be an object")
        unknown = sorted(key for key in meta if key not in META_KEYS)
        if unknown:
            raise ApiProblem(
                "INVALID_REQUEST",
                f"meta accepts only {', '.join(sorted(META_KEYS))}",
                errors=[{"field": f"meta.{key}", "reason": "unknown member"} for key in unknown],
            )
    _require_ready(durable)
    view = await durable.create(session_id, seed, meta, seed_breaks=body.element_breaks("seed"))
    return _created(view)


@router.get("/sessions", response_model=SessionPage, responses=_problems(), summary="List sessions in creation order")
async def list_sessions(
    durable: Durable,
    parent: Annotated[str | None, Query(description="only the children of this session")] = None,
    limit: Annotated[str | None, Query(description="page size, 1-1000 (default 100)")] = None,
    cursor: Annotated[str | None, Query(description="the nextCursor of the previous page")] = None,
) -> Response:
    page_size = bounded_query_integer(limit, "limit", default=100, low=1, high=1000)
    if parent is not None:
        check_id(parent, "parent")
    # The store decodes the cursor, and a malformed one is request syntax: refused before readiness (spec 2.3).
    sessions, next_cursor = durable.store.page(parent=parent, limit=page_size, cursor=cursor)
    _require_ready(durable)
    items = [session.view().to_json() for session in sessions]
    return _json(orjson.dumps({"items": items, "nextCursor": next_cursor}))


@router.get("/sessions/{id}", response_model=SessionOut, responses=_problems(404), summary="One session")
async def get_session(id: SessionId, durable: Durable) -> Response:
    check_id(id)
    _require_ready(durable)
    return _json(_session_json(durable.get(id).view()))


@router.delete(
    "/sessions/{id}",
    status_code=204,
    response_class=Response,
    responses=_problems(404),
    summary="Delete a session and its log (its children keep theirs)",
)
async def delete_session(id: SessionId, durable: Durable) -> Response:
    check_id(id)
    _require_ready(durable)
    await durable.delete(id)
    return Response(status_code=204)


# -- events ----------------------------------------------------------------------------------------------------------


@router.post(
    "/sessions/{id}/events",
    status_code=201,
    response_model=AppendResult,
    responses=_problems(404, 409, 413, 415),
    openapi_extra=_request_body(AppendRequest, required=True),
    summary="Append events (atomically: all are stored, or none)",
)
async def append_events(id: SessionId, request: Request, durable: Durable) -> Response:
    return await append(request, durable, id)


async def append(request: Request, durable: DurableStore, id: str) -> Response:
    """``POST /sessions/{id}/events``; also called straight from the request guard (the hot path)."""
    check_id(id)
    body = await _read_body(request, empty_is_object=False)
    refuse_unknown_members(body, APPEND_MEMBERS)
    body.refuse_breaks_outside("events")
    events = body.members.get("events")
    if not isinstance(events, list) or not 1 <= len(events) <= MAX_APPEND_EVENTS:
        raise invalid_request("events", f"must be an array of 1 to {MAX_APPEND_EVENTS} events")
    expected_seq = optional_integer(body, "expectedSeq")
    instance = optional_string(body, "instance")
    _require_ready(durable)
    _, lines, view = await durable.append(
        id, events, expected_seq=expected_seq, instance=instance, breaks=body.element_breaks("events")
    )
    stored = b"[" + lines[:-1].replace(b"\n", b",") + b"]"
    return _json(b'{"events":' + stored + b',"session":' + _session_json(view) + b"}", 201)


@router.get("/sessions/{id}/events", response_model=EventsPage, responses=_problems(404), summary="Read the log")
async def read_events(
    id: SessionId,
    durable: Durable,
    from_: Annotated[str | None, Query(alias="from", description="the first seq (default 0)")] = None,
    limit: Annotated[str | None, Query(description="at most this many events, 1-10000 (default 1000)")] = None,
) -> Response:
    check_id(id)
    start = bounded_query_integer(from_, "from", default=0, low=0, high=MAX_SAFE_INTEGER)
    count = bounded_query_integer(limit, "limit", default=1000, low=1, high=10000)
    _require_ready(durable)
    log = durable.get(id).log
    total = len(log)
    stop = min(total, start + count)
    events = log.json_array(start, stop) if start < total else b"[]"
    next_seq = start + max(0, stop - start)
    return _json(b'{"events":' + events + b',"nextSeq":%d,"eventCount":%d}' % (next_seq, total))


@router.get(
    "/sessions/{id}/history",
    response_model=History,
    responses=_problems(404),
    summary="The model history, now or at a turn/end",
)
async def read_history(
    id: SessionId,
    durable: Durable,
    at_seq: Annotated[str | None, Query(alias="atSeq", description="the seq of a turn/end")] = None,
) -> Response:
    check_id(id)
    boundary = query_integer(at_seq, "atSeq")
    _require_ready(durable)
    messages, count = durable.store.history(id, boundary)
    return _json(dumps({"messages": messages, "eventCount": count}))


# -- snapshot and fork -----------------------------------------------------------------------------------------------


@router.post(
    "/sessions/{id}/snapshot",
    response_model=SnapshotOut,
    responses=_problems(404, 409, 413, 415),
    openapi_extra=_request_body(SnapshotRequest),
    summary="The seed and meta a fork would use, at a turn boundary",
)
async def snapshot_session(id: SessionId, request: Request, durable: Durable) -> Response:
    _, instance, at_seq, expected_seq = await _boundary_body(request, id, SNAPSHOT_MEMBERS)
    _require_ready(durable)
    snapshot = durable.store.snapshot(id, at_seq=at_seq, instance=instance, expected_seq=expected_seq)

    async def pieces() -> AsyncIterator[bytes | memoryview]:
        # The seed (an independent copy) is sent a piece at a time: a large one is never concatenated whole.
        yield b'{"source":' + orjson.dumps(snapshot.source.to_json()) + b',"seed":'
        for piece in snapshot.seed.json_array_chunks():
            yield piece
        yield b',"meta":' + orjson.dumps(snapshot.meta) + b"}"

    return StreamingResponse(pieces(), media_type="application/json")


@router.post(
    "/sessions/{id}/fork",
    status_code=201,
    response_model=SessionOut,
    responses=_problems(404, 409, 413, 415),
    openapi_extra=_request_body(ForkRequest),
    summary="Create a child session from this one's log, at a turn boundary",
)
async def fork_session(id: SessionId, request: Request, durable: Durable) -> Response:
    body, instance, at_seq, expected_seq = await _boundary_body(request, id, FORK_MEMBERS)
    child_id = optional_string(body, "sessionId")
    if child_id is not None:
        check_id(child_id, "sessionId")
    _require_ready(durable)
    view = await durable.fork(id, child_id=child_id, at_seq=at_seq, instance=instance, expected_seq=expected_seq)
    return _created(view)


# -- health ----------------------------------------------------------------------------------------------------------


@router.get("/healthz", response_model=Health, summary="Liveness: always ok while the process serves")
async def healthz() -> Response:
    return _json(b'{"status":"ok"}')


@router.get("/readyz", response_model=Ready, responses={503: {"description": "still recovering"}}, summary="Readiness")
async def readyz(durable: Durable) -> Response:
    _require_ready(durable)
    corrupt = [{"id": item.id, "path": item.path, "reason": item.reason} for item in durable.corrupt]
    return _json(orjson.dumps({"status": "ready", "sessions": len(durable.store), "corrupt": corrupt}))
