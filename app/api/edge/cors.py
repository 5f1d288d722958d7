"""Pages of other origins (spec 9, "Browsers"): Starlette's ``CORSMiddleware`` for the origins of
``FORKLOG_CORS_ORIGINS`` (none by default), its preflight answered as the spec asks (``204``, no body) and its
refusal as a problem, like every other error."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.wire.problems import send_problem
from app.domain.errors import ErrorCode

__all__ = ["ALLOWED_HEADERS", "ALLOWED_METHODS", "EXPOSED_HEADERS", "Cors", "is_preflight"]

ALLOWED_METHODS = ("GET", "POST", "PATCH", "DELETE")
ALLOWED_HEADERS = ("Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID")
EXPOSED_HEADERS = ("Location", "Idempotent-Replayed")
PREFLIGHT_MAX_AGE = 600


def is_preflight(headers: Headers) -> bool:
    """Whether an OPTIONS request with these headers is a browser's preflight."""
    return "origin" in headers and "access-control-request-method" in headers


class Cors(CORSMiddleware):
    def __init__(self, app: ASGIApp, *, origins: Sequence[str]) -> None:
        super().__init__(
            app,
            allow_origins=origins,
            allow_methods=ALLOWED_METHODS,
            allow_headers=ALLOWED_HEADERS,
            expose_headers=EXPOSED_HEADERS,
            max_age=PREFLIGHT_MAX_AGE,
        )
        self.any_origin_allowed = bool(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "OPTIONS":
            headers = Headers(scope=scope)
            if is_preflight(headers):
                await self.answer_preflight(scope, send, headers)
                return
        elif not self.any_origin_allowed:
            # With no origin allowed no answer varies by Origin (none carries CORS headers): nothing to label.
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)

    async def answer_preflight(self, scope: Scope, send: Send, headers: Headers) -> None:
        """The answer to a preflight: 204 with what it may do, or FORBIDDEN as a problem."""
        answer = self.preflight_response(request_headers=headers)
        if answer.status_code != 200:
            refused = bytes(answer.body).decode().removeprefix("Disallowed CORS ")
            detail = (
                f"a page from {headers['origin']!r} may not make this request here ({refused} not allowed); "
                "list its origin in FORKLOG_CORS_ORIGINS to allow it"
            )
            await send_problem(scope, send, ErrorCode.FORBIDDEN, detail)
            return
        kept = [(name, value) for name, value in answer.raw_headers if name not in (b"content-length", b"content-type")]
        await send({"type": "http.response.start", "status": 204, "headers": kept})
        await send({"type": "http.response.body", "body": b""})
