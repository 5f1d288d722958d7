"""Every error answer is an RFC 9457 problem (``application/problem+json``) with a stable ``code``.

One table maps codes to statuses and titles, one function builds every body, and one handler per exception family
(the domain's, the storage's, the framework's own) calls it, so no error can leave in another shape.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Route

from app.domain.errors import SessionError
from app.persistence.errors import StorageUnavailable

log = logging.getLogger("forklog.api")

PROBLEM_JSON = "application/problem+json"

# code -> (status, title)
PROBLEMS: dict[str, tuple[int, str]] = {
    "SESSION_NOT_FOUND": (404, "Session not found"),
    "SESSION_ALREADY_EXISTS": (409, "Session already exists"),
    "SESSION_NOT_LIVE": (409, "Not the live session instance"),
    "NOT_AT_TURN_BOUNDARY": (409, "Not at a turn boundary"),
    "SEQ_CONFLICT": (409, "Sequence conflict"),
    "INVALID_BOUNDARY": (422, "Invalid boundary"),
    "INVALID_SEED": (422, "Invalid seed"),
    "INVALID_EVENT": (422, "Invalid event"),
    "INVALID_REQUEST": (422, "Invalid request"),
    "NOT_FOUND": (404, "Not found"),
    "METHOD_NOT_ALLOWED": (405, "Method not allowed"),
    "FORBIDDEN": (403, "Forbidden"),
    "REQUEST_TIMEOUT": (408, "Request timeout"),
    "PAYLOAD_TOO_LARGE": (413, "Payload too large"),
    "HEADERS_TOO_LARGE": (431, "Request headers too large"),
    "UNSUPPORTED_MEDIA_TYPE": (415, "Unsupported media type"),
    "NOT_READY": (503, "Not ready"),
    "STORAGE_UNAVAILABLE": (503, "Storage unavailable"),
    "SESSION_CORRUPT": (503, "Session corrupt"),
    "INTERNAL": (500, "Internal error"),
}


# Answers given without reading the request body (or all of it).
UNREAD_BODY_CODES = frozenset({"PAYLOAD_TOO_LARGE", "UNSUPPORTED_MEDIA_TYPE", "REQUEST_TIMEOUT", "FORBIDDEN"})


class ApiProblem(Exception):
    """An error decided in the HTTP layer (request syntax, limits, readiness)."""

    def __init__(self, code: str, detail: str, **facts: Any) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.facts = facts


def invalid_request(field: str, reason: str, detail: str | None = None) -> ApiProblem:
    return ApiProblem(
        "INVALID_REQUEST", detail or f"{field or 'the body'}: {reason}", errors=[{"field": field, "reason": reason}]
    )


def problem_type(code: str) -> str:
    return f"urn:forklog:problem:{code.lower().replace('_', '-')}"


def problem_body(
    code: str, detail: str, instance: str, facts: dict[str, Any] | None = None, *, status: int | None = None
) -> dict[str, Any]:
    """The one place a problem's members are put together (``status`` overrides the code's usual one)."""
    usual, title = PROBLEMS[code]
    status = usual if status is None else status
    body: dict[str, Any] = {
        "type": problem_type(code),
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        "instance": instance,
    }
    if facts:
        body.update(facts)
    if code == "INVALID_REQUEST" and not body.get("errors"):
        body["errors"] = [{"field": "", "reason": detail}]
    return body


async def send_problem(
    scope: MutableMapping[str, Any],
    send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    code: str,
    detail: str,
    facts: dict[str, Any] | None = None,
    *,
    status: int | None = None,
) -> None:
    """Answer a problem straight from ASGI middleware, before any route runs (nothing of the body is read)."""
    # scope["path"] is already decoded: decoding again would turn %25xx into a byte.
    body = problem_body(code, detail, scope.get("path", ""), facts, status=status)
    payload = orjson.dumps(body)
    headers = [(b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(payload)).encode())]
    if code in UNREAD_BODY_CODES:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": body["status"], "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def problem_response(request: Request, code: str, detail: str, facts: dict[str, Any] | None = None) -> Response:
    # The decoded path: request.url.path would re-encode a '?' or '#' that the client sent as %3F or %23.
    body = problem_body(code, detail, request.scope["path"], facts)
    status = body["status"]
    headers = {"Allow": body.pop("allow")} if "allow" in body else {}
    if code in UNREAD_BODY_CODES:
        # The body was refused unread: close the connection rather than let the server drain (read and discard)
        # up to the whole of it, as it would to keep a keep-alive connection usable.
        headers["Connection"] = "close"
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM_JSON, headers=headers)


async def _session_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SessionError)
    return problem_response(request, exc.code.value, exc.detail, exc.facts)


async def _api_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiProblem)
    return problem_response(request, exc.code, exc.detail, exc.facts)


async def _storage_unavailable(request: Request, exc: Exception) -> Response:
    log.error("storage refused a write: %s", exc)
    return problem_response(request, "STORAGE_UNAVAILABLE", f"{exc}; nothing was stored, retry later")


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return problem_response(request, "NOT_FOUND", f"no route {request.url.path}; check the URL")
    if exc.status_code == 405:
        allow = ", ".join(_allowed_methods(request)) or (exc.headers or {}).get("Allow")
        facts = {"allow": allow} if allow else None
        return problem_response(request, "METHOD_NOT_ALLOWED", f"{request.method} is not allowed here", facts)
    if exc.status_code == 413:
        return problem_response(request, "PAYLOAD_TOO_LARGE", str(exc.detail))
    if exc.status_code == 415:
        return problem_response(request, "UNSUPPORTED_MEDIA_TYPE", str(exc.detail))
    if exc.status_code >= 500:
        return problem_response(request, "INTERNAL", str(exc.detail))
    return problem_response(request, "INVALID_REQUEST", str(exc.detail))


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for error in exc.errors():
        location = [str(part) for part in error.get("loc", ())]
        if location and location[0] in ("body", "query", "path", "header"):
            location = location[1:]
        errors.append({"field": ".".join(location), "reason": str(error.get("msg", "invalid"))})
    return problem_response(request, "INVALID_REQUEST", "the request is malformed", {"errors": errors})


async def _internal(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(request, "INTERNAL", "an internal error occurred; please report it")


async def problem_for(request: Request, exc: Exception) -> Response:
    """The answer the app's handlers give ``exc``, for code that runs outside the router (the append hot path)."""
    if isinstance(exc, SessionError):
        return await _session_error(request, exc)
    if isinstance(exc, ApiProblem):
        return await _api_problem(request, exc)
    if isinstance(exc, StorageUnavailable):
        return await _storage_unavailable(request, exc)
    return await _internal(request, exc)


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


def install_problem_handlers(app: FastAPI, api_routes: Sequence[BaseRoute] = ()) -> None:
    """Answer every error as a problem; ``api_routes`` (one per method) give a 405 its whole Allow header."""
    app.state.api_routes = api_routes
    app.add_exception_handler(SessionError, _session_error)
    app.add_exception_handler(ApiProblem, _api_problem)
    app.add_exception_handler(StorageUnavailable, _storage_unavailable)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _internal)
