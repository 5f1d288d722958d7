"""Keys on every request (spec 9): who is calling, in which tenant, allowed to do what; before anything else runs.

With a keys file every route but the open ones (health, readiness, the OpenAPI document, the docs pages and the
session browser's static files) needs ``Authorization: Bearer <key>``; the stream also takes ``?access_token=``
(a browser's ``EventSource`` cannot send headers). No key, a malformed one or one not in the file answers ``401
UNAUTHENTICATED`` with ``WWW-Authenticate: Bearer``; a key without the route's scope ``403 FORBIDDEN``: ``read``
for every GET and a snapshot, ``write`` for a create, an append, a fork or a delete. Both come before the body is
read, so they win over 413, 415 and every body error. The key found rides in the request's state (``api_key``):
its tenant is the caller's tenant; an open route sees it too when one is sent (``/readyz`` lists corrupt sessions
to an ``admin`` key only), and ignores a bad one. A stream or a long-poll asks again while it lasts
(:mod:`app.api.keys_in_force`). A WebSocket handshake is refused unaccepted: the service takes no upgrade.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.problems import send_problem
from app.domain.access import ApiKey, KeyRing
from app.domain.access import Scope as KeyScope
from app.domain.errors import ErrorCode

__all__ = ["KEY_STATE", "Authenticator", "challenge", "is_open_path", "refuse_websocket", "required_scope"]

KEY_STATE = "api_key"

OPEN_PATHS = frozenset({"/healthz", "/readyz", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
# The docs pages' and the session browser's own files: a page must load before it can ask for a key.
OPEN_PREFIXES = ("/docs/assets/", "/ui/")
STREAM_SUFFIX = "/events/stream"
METRICS_PATH = "/metrics"
HOW_TO_GET_ONE = "python -m app keys new --tenant T --scope read --scope write makes one"


def is_open_path(path: str) -> bool:
    return path in OPEN_PATHS or path == "/ui" or path.startswith(OPEN_PREFIXES)


def required_scope(method: str, path: str) -> KeyScope:
    if path == METRICS_PATH:  # spec 13: counts over every tenant are for operators
        return KeyScope.ADMIN
    if method in ("GET", "HEAD", "OPTIONS") or (method == "POST" and path.endswith("/snapshot")):
        return KeyScope.READ
    return KeyScope.WRITE


class _NoKey(Exception):
    def __init__(self, detail: str, *, invalid: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.invalid = invalid  # a key was sent (RFC 6750: error="invalid_token")


def _presented(scope: Scope, headers: Headers) -> str | None:
    """The key the request sends, None if it sends none; :class:`_NoKey` when it sends one in a shape that is not
    a key (two headers, another scheme, an empty key...)."""
    values = headers.getlist("authorization")
    if len(values) > 1:
        raise _NoKey("send one Authorization header, not several", invalid=True)
    if values:
        scheme, _, secret = values[0].strip().partition(" ")
        secret = secret.strip(" ")
        if scheme.lower() != "bearer" or not secret or " " in secret:
            raise _NoKey("the Authorization header must be: Bearer <key>", invalid=True)
        return secret
    if scope["method"] == "GET" and scope["path"].endswith(STREAM_SUFFIX) and scope.get("query_string"):
        tokens = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True).get("access_token")
        if tokens is not None:
            if len(tokens) != 1 or not tokens[0]:
                raise _NoKey("send one non-empty access_token", invalid=True)
            return str(tokens[0])
    return None


class Authenticator:
    """Refuses requests without a key in force, or without its scope (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, keys: Callable[[], KeyRing]) -> None:
        self.app = app
        self.keys = keys

    def _key(self, scope: Scope, headers: Headers) -> ApiKey:
        secret = _presented(scope, headers)
        if secret is None:
            raise _NoKey(f"this route needs a key: send Authorization: Bearer <key> ({HOW_TO_GET_ONE})", invalid=False)
        key = self.keys().find(secret)
        if key is None:
            raise _NoKey(
                "the key is not one this service knows (revoked, mistyped, or from another keys file)", invalid=True
            )
        return key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await refuse_websocket(send)
            else:  # the lifespan
                await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path = scope["path"]
        if is_open_path(path):
            with contextlib.suppress(_NoKey):
                scope.setdefault("state", {})[KEY_STATE] = self._key(scope, headers)
            await self.app(scope, receive, send)
            return
        try:
            key = self._key(scope, headers)
        except _NoKey as refusal:
            await _refuse_unauthenticated(scope, send, refusal)
            return
        wanted = required_scope(scope["method"], path)
        if not key.allows(wanted):
            detail = f"key {key.id!r} lacks the {wanted.value!r} scope this request needs"
            await send_problem(scope, send, ErrorCode.FORBIDDEN, detail)
            return
        scope.setdefault("state", {})[KEY_STATE] = key
        await self.app(scope, receive, send)


def challenge(*, invalid: bool) -> str:
    """The ``WWW-Authenticate`` value of a 401; ``invalid`` when a key was sent (RFC 6750: ``invalid_token``)."""
    return 'Bearer realm="forklog"' + (', error="invalid_token"' if invalid else "")


async def _refuse_unauthenticated(scope: Scope, send: Send, refusal: _NoKey) -> None:
    headers = {"WWW-Authenticate": challenge(invalid=refusal.invalid)}
    await send_problem(scope, send, ErrorCode.UNAUTHENTICATED, refusal.detail, headers=headers)


async def refuse_websocket(send: Send) -> None:
    """Close a WebSocket handshake unaccepted (the server answers 403): the service accepts no upgrade (spec 9).
    Nothing is logged here: the handshake's URL may carry ``?access_token=``."""
    await send({"type": "websocket.close", "code": 1008})
