"""Sessions: create, list, read one, archive, delete."""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from app.api.docs.openapi import SESSION_ID
from app.api.routing.calling import body_of, json_response, key_of, new_router, service_of, tenant_of
from app.api.routing.declarations import RouteSpec
from app.api.wire.idempotency_key import answer_response, idempotent_request
from app.api.wire.listing import list_query_of, query_digest
from app.api.wire.problems import invalid_request
from app.api.wire.requests import CREATE, LIST_QUERY, UPDATE
from app.api.wire.resources import decode_cursor, encode_cursor, match_json, session_json, session_payload
from app.api.wire.schemas import SessionOut, SessionPage
from app.domain.access import Scope
from app.domain.errors import ErrorCode
from app.domain.listing import PageRequest

__all__ = ["router"]

router = new_router()


@router.declare(
    RouteSpec(
        "POST",
        "/sessions",
        Scope.WRITE,
        body=CREATE,
        refusals=(
            ErrorCode.SESSION_ALREADY_EXISTS,
            ErrorCode.SESSION_CORRUPT,
            ErrorCode.INVALID_SEED,
            ErrorCode.QUOTA_EXCEEDED,
        ),
        idempotent=True,
        created=True,
    ),
    SessionOut,
    status_code=201,
    summary="Create a session, optionally from a seed (a snapshot's answer creates the fork's child)",
)
async def create_session(request: Request) -> Response:
    body = await body_of(request, empty_is_object=True)
    members = CREATE.parse(body)
    tenant = tenant_of(request)
    service = service_of(request)

    answer, replayed = await service.idempotently(
        idempotent_request(request, tenant, body.raw),
        lambda change: service.create(
            tenant,
            members["id"],
            members["seed"],
            members["meta"],
            seed_breaks=body.element_breaks("seed"),
            change=change,
        ),
    )
    return answer_response(answer, replayed)


@router.declare(
    RouteSpec("GET", "/sessions", Scope.READ, query=LIST_QUERY, standby_reads=True),
    SessionPage,
    summary="List sessions by creation or by last activity, filtered or searched",
)
async def list_sessions(request: Request) -> Response:
    query = LIST_QUERY.parse(request.query_params)
    listing = list_query_of(query)
    belongs_to = query_digest(listing, query)
    after = None
    if query["cursor"] is not None:
        # A malformed cursor is request syntax: refused before readiness (spec 2.3); so is one of another query.
        after, made_for = decode_cursor(query["cursor"])
        if made_for != belongs_to:
            raise invalid_request(
                "cursor",
                "belongs to another query",
                "the cursor was made for another order, direction, filter or q; start again without it",
            )
    page = PageRequest(query["limit"], after=after, query=listing)
    found, last = await service_of(request).reads.page(tenant_of(request), page, q=query["q"])
    items = [
        session_json(session) if match is None else {**session_json(session), "match": match_json(match)}
        for session, match in found
    ]
    next_cursor = encode_cursor(last, belongs_to) if last else None
    return json_response(orjson.dumps({"items": items, "nextCursor": next_cursor}))


@router.declare(
    RouteSpec("GET", "/sessions/{id}", Scope.READ, refusals=SESSION_ID, standby_reads=True),
    SessionOut,
    summary="One session",
)
async def get_session(request: Request) -> Response:
    key = key_of(request)
    return json_response(session_payload(await service_of(request).reads.get(key)))


@router.declare(
    RouteSpec(
        "PATCH",
        "/sessions/{id}",
        Scope.WRITE,
        body=UPDATE,
        refusals=(*SESSION_ID, ErrorCode.SESSION_NOT_LIVE, ErrorCode.SEQ_CONFLICT),
    ),
    SessionOut,
    summary="Archive or unarchive a session (hidden from lists and searches unless asked for; its log unchanged)",
)
async def update_session(request: Request) -> Response:
    key = key_of(request)
    members = UPDATE.parse(await body_of(request, empty_is_object=False))
    session = await service_of(request).set_archived(
        key, members["archived"], expected_seq=members["expectedSeq"], instance=members["instance"]
    )
    return json_response(session_payload(session))


@router.declare(
    RouteSpec("DELETE", "/sessions/{id}", Scope.WRITE, refusals=SESSION_ID),
    status_code=204,
    response_class=Response,
    summary="Delete a session and its log (its children keep theirs)",
)
async def delete_session(request: Request) -> Response:
    key = key_of(request)
    await service_of(request).delete(key)
    return Response(status_code=204)
