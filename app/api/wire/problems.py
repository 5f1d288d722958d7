"""Every error answer is an RFC 9457 problem (``application/problem+json``) with a stable ``code``.

One table maps each code to its status, title and the facts it carries; one function builds every body; one handler
answers every :class:`~app.domain.errors.ForklogError` (whatever its layer), and three more own the framework's
errors (no route, wrong method, a malformed request it caught itself) and bugs, so no error leaves in another shape.
Each error class carries one code (the tree is drawn in :mod:`app.domain.errors` and :mod:`app.backends.errors`);
this table is the one place a code becomes a status. The storage layer's details are whole: whether a read failed,
a change was refused, or a change's outcome is unknown is said by the class that was raised, not added here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Route

from app.api.telemetry.request_ids import new_request_id, request_id_of
from app.domain.errors import ErrorCode, ForklogError

__all__ = [
    "PROBLEMS",
    "PROBLEM_CODE_STATE",
    "PROBLEM_JSON",
    "ProblemSpec",
    "RequestProblem",
    "install_problem_handlers",
    "invalid_request",
    "problem_body",
    "problem_response",
    "problem_type",
    "send_problem",
]

logger = logging.getLogger("forklog.api")

PROBLEM_JSON = "application/problem+json"
# Where an answered problem's code is noted in the request's state (the metrics count problems by code).
PROBLEM_CODE_STATE = "problem_code"


@dataclass(frozen=True, slots=True)
class ProblemSpec:
    """What a code looks like on the wire: its status, its title, and the facts its body always carries
    (``optional`` ones only when they apply)."""

    status: int
    title: str
    facts: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()


PROBLEMS: dict[ErrorCode, ProblemSpec] = {
    ErrorCode.SESSION_NOT_FOUND: ProblemSpec(404, "Session not found"),
    ErrorCode.SESSION_ALREADY_EXISTS: ProblemSpec(409, "Session already exists"),
    ErrorCode.SESSION_NOT_LIVE: ProblemSpec(409, "Not the live session instance"),
    ErrorCode.NOT_AT_TURN_BOUNDARY: ProblemSpec(
        409, "Not at a turn boundary", ("lastEventType", "openTurn", "lastTurnEndSeq")
    ),
    ErrorCode.NOT_IN_TURN: ProblemSpec(409, "No turn is open", ("lastTurnEndSeq",)),
    ErrorCode.SEQ_CONFLICT: ProblemSpec(409, "Sequence conflict", ("currentSeq",)),
    ErrorCode.INVALID_BOUNDARY: ProblemSpec(422, "Invalid boundary", (), ("reason",)),
    ErrorCode.INVALID_SEED: ProblemSpec(422, "Invalid seed", ("reason",), ("index",)),
    ErrorCode.INVALID_EVENT: ProblemSpec(422, "Invalid event", ("index", "reason")),
    ErrorCode.INVALID_REQUEST: ProblemSpec(422, "Invalid request", ("errors",)),
    ErrorCode.UNAUTHENTICATED: ProblemSpec(401, "Unauthenticated"),
    ErrorCode.FORBIDDEN: ProblemSpec(403, "Forbidden"),
    ErrorCode.IDEMPOTENCY_KEY_IN_PROGRESS: ProblemSpec(409, "Idempotency key in progress"),
    ErrorCode.IDEMPOTENCY_KEY_REUSED: ProblemSpec(422, "Idempotency key reused"),
    ErrorCode.NOT_FOUND: ProblemSpec(404, "Not found"),
    ErrorCode.METHOD_NOT_ALLOWED: ProblemSpec(405, "Method not allowed"),
    ErrorCode.REQUEST_TIMEOUT: ProblemSpec(408, "Request timeout"),
    ErrorCode.PAYLOAD_TOO_LARGE: ProblemSpec(413, "Payload too large"),
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: ProblemSpec(415, "Unsupported media type"),
    ErrorCode.HEADERS_TOO_LARGE: ProblemSpec(431, "Request headers too large"),
    ErrorCode.NOT_READY: ProblemSpec(503, "Not ready"),
    ErrorCode.STORAGE_UNAVAILABLE: ProblemSpec(503, "Storage unavailable"),
    ErrorCode.SESSION_CORRUPT: ProblemSpec(503, "Session corrupt", ("reason",)),
    ErrorCode.INTERNAL: ProblemSpec(500, "Internal error"),
    ErrorCode.QUOTA_EXCEEDED: ProblemSpec(429, "Quota exceeded", ("quota", "limit", "used")),
    ErrorCode.RATE_LIMITED: ProblemSpec(429, "Rate limited", ("retryAfterMs",)),
}

# Answers given without reading the request body (or all of it): the connection is closed rather than drained.
UNREAD_BODY_CODES = frozenset(
    {
        ErrorCode.PAYLOAD_TOO_LARGE,
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        ErrorCode.REQUEST_TIMEOUT,
        ErrorCode.FORBIDDEN,
        ErrorCode.UNAUTHENTICATED,
        ErrorCode.RATE_LIMITED,
    }
)


class RequestProblem(ForklogError):
    """An error decided in the HTTP layer (request syntax, content type, limits)."""

    def __init__(self, code: ErrorCode, detail: str, **facts: Any) -> None:
        super().__init__(detail, code=code, **facts)


def invalid_request(field: str, reason: str, detail: str | None = None) -> RequestProblem:
    return RequestProblem(
        ErrorCode.INVALID_REQUEST, detail or f"{field or 'the body'}: {reason}", field=field, reason=reason
    )


def problem_type(code: ErrorCode) -> str:
    return f"urn:forklog:problem:{code.value.lower().replace('_', '-')}"


def problem_body(
    code: ErrorCode,
    detail: str,
    instance: str,
    facts: dict[str, Any] | None = None,
    *,
    status: int | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """The one place a problem's members are put together (``status`` overrides the code's usual one; without a
    ``request_id`` a new one is made).

    An INVALID_REQUEST names what is wrong in ``errors`` (``[{field, reason}]``): from the facts ``errors`` or
    ``field`` and ``reason``, else the body as a whole.
    """
    spec = PROBLEMS[code]
    body: dict[str, Any] = {
        "type": problem_type(code),
        "title": spec.title,
        "status": spec.status if status is None else status,
        "detail": detail,
        "code": code.value,
        "instance": instance,
        "requestId": request_id if request_id is not None else new_request_id(),
    }
    facts = dict(facts or {})
    if code is ErrorCode.INVALID_REQUEST:
        errors = facts.pop("errors", None)
        field, reason = facts.pop("field", None), facts.pop("reason", None)
        if not errors:
            errors = [{"field": field, "reason": reason}] if field is not None else [{"field": "", "reason": detail}]
        facts["errors"] = errors
    body.update(facts)
    return body


def _headers_for(code: ErrorCode, body: dict[str, Any]) -> dict[str, str]:
    headers = {"Allow": body.pop("allow")} if "allow" in body else {}
    if code in UNREAD_BODY_CODES:
        # The body was refused unread: close the connection rather than let the server drain (read and discard)
        # up to the whole of it, as it would to keep a keep-alive connection usable.
        headers["Connection"] = "close"
    return headers


def problem_response(request: Request, code: ErrorCode, detail: str, facts: dict[str, Any] | None = None) -> Response:
    # The decoded path: request.url.path would re-encode a '?' or '#' that the client sent as %3F or %23.
    scope = request.scope
    body = problem_body(code, detail, scope["path"], facts, request_id=request_id_of(scope))
    scope["state"][PROBLEM_CODE_STATE] = code
    headers = _headers_for(code, body)
    return Response(orjson.dumps(body), status_code=body["status"], media_type=PROBLEM_JSON, headers=headers)


async def send_problem(
    scope: MutableMapping[str, Any],
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    code: ErrorCode,
    detail: str,
    facts: dict[str, Any] | None = None,
    *,
    status: int | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Answer a problem straight from ASGI middleware, before any route runs (nothing of the body is read)."""
    # scope["path"] is already decoded: decoding again would turn %25xx into a byte.
    body = problem_body(code, detail, scope.get("path", ""), facts, status=status, request_id=request_id_of(scope))
    scope["state"][PROBLEM_CODE_STATE] = code
    headers = {**_headers_for(code, body), **(headers or {})}
    payload = orjson.dumps(body)
    raw_headers = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]
    await send({"type": "http.response.start", "status": body["status"], "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


async def _forklog_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ForklogError)
    if exc.code is ErrorCode.STORAGE_UNAVAILABLE:
        # The storage error's own detail says whether a change may have been stored (a read's never was).
        logger.error("storage refused: %s", exc.detail)
    return problem_response(request, exc.code, exc.detail, exc.facts)


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return problem_response(request, ErrorCode.NOT_FOUND, f"no route {request.url.path}; check the URL")
    if exc.status_code == 405:
        allow = ", ".join(_allowed_methods(request)) or (exc.headers or {}).get("Allow")
        facts = {"allow": allow} if allow else None
        return problem_response(request, ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here", facts)
    if exc.status_code == 413:
        return problem_response(request, ErrorCode.PAYLOAD_TOO_LARGE, str(exc.detail))
    if exc.status_code == 415:
        return problem_response(request, ErrorCode.UNSUPPORTED_MEDIA_TYPE, str(exc.detail))
    if exc.status_code >= 500:
        return problem_response(request, ErrorCode.INTERNAL, str(exc.detail))
    return problem_response(request, ErrorCode.INVALID_REQUEST, str(exc.detail))


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for error in exc.errors():
        location = [str(part) for part in error.get("loc", ())]
        if location and location[0] in ("body", "query", "path", "header"):
            location = location[1:]
        errors.append({"field": ".".join(location), "reason": str(error.get("msg", "invalid"))})
    return problem_response(request, ErrorCode.INVALID_REQUEST, "the request is malformed", {"errors": errors})


async def _internal(request: Request, exc: Exception) -> Response:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(request, ErrorCode.INTERNAL, "an internal error occurred; please report it")


def _allowed_methods(request: Request) -> list[str]:
    """Every method the API's routes of this path answer (Starlette's 405 names only the first route it tried)."""
    path = request.scope["path"]
    routes: Sequence[BaseRoute] = request.app.state.api_routes
    return sorted(
        {
            method
            for route in routes
            if isinstance(route, Route) and route.path_regex.fullmatch(path)
            for method in route.methods or ()
        }
    )


def install_problem_handlers(app: FastAPI, api_routes: Sequence[BaseRoute]) -> None:
    """Answer every error as a problem; ``api_routes`` give a 405 its whole ``Allow`` header."""
    app.state.api_routes = list(api_routes)
    app.add_exception_handler(ForklogError, _forklog_error)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _internal)
