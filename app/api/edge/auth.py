"""Keys on every request (spec 9): who is calling, in which tenant, allowed to do what; before anything else runs.

With a keys file every route but the open ones (health, readiness, the OpenAPI document, the docs pages and the
session browser's static files) needs ``Authorization: Bearer <key>``; the stream also takes ``?access_token=``
(a browser's ``EventSource`` cannot send headers). No key, a malformed one or one not in the file answers ``401
UNAUTHENTICATED`` with ``WWW-Authenticate: Bearer``; a key without the route's scope ``403 FORBIDDEN``: ``read``
for every GET and a snapshot, ``write`` for a create, an append, a fork or a delete (each route's declaration,
:class:`~app.api.routing.declarations.RouteSpec`, says which, and whether it is open). Both come before the body is
read, so they win over 413, 415 and every body error. The key found rides in the request's state (``api_key``):
its tenant is the caller's tenant; an open route sees it too when one is sent (``/readyz`` lists corrupt sessions
to an ``admin`` key only), and ignores a bad one. A stream or a long-poll asks again while it lasts
(:mod:`app.api.edge.keys_in_force`). A WebSocket handshake is refused unaccepted: the service takes no upgrade.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Scope, Send

from app.api.edge.guard import Guard
from app.api.routing.declarations import MatchedRoute, RouteSpec, matched_route, spec_of
from app.api.wire.problems import send_problem
from app.domain.access import ApiKey, KeyRing
from app.domain.access import Scope as KeyScope
from app.domain.errors import ErrorCode

__all__ = ["KEY_STATE", "Authenticator", "challenge", "required_scope"]

KEY_STATE = "api_key"

HOW_TO_GET_ONE = "python -m app keys new --tenant T --scope read --scope write makes one"


def _method_scope(method: str) -> KeyScope:
    return KeyScope.READ if method in ("GET", "HEAD", "OPTIONS") else KeyScope.WRITE


def required_scope(method: str, matched: MatchedRoute) -> KeyScope | None:
    """The scope a request needs, None when it needs no key: its route's declaration. A request that names no
    route's path and method (a 404, a 405) needs one for its method (``read`` for a GET), ``admin`` on a path only
    served to admins (spec 13: counts over every tenant are for operators), none on an open route's path (or an open
    folder's, which the router redirects to its slash: a page must load before it can ask for a key)."""
    if matched.full is not None:
        spec = spec_of(matched.full)
        return _method_scope(method) if spec is None else spec.scope
    specs = [spec_of(route) for route in (*matched.partial, *matched.folder)]
    if any(spec is not None and spec.public for spec in specs):
        return None
    if any(spec is not None and spec.scope is KeyScope.ADMIN for spec in specs):
        return KeyScope.ADMIN
    return _method_scope(method)


class _NoKey(Exception):
    def __init__(self, detail: str, *, invalid: bool) -> None:
        super().__init__(detail)
        self.detail = detail
        self.invalid = invalid  # a key was sent (RFC 6750: error="invalid_token")


def _presented(scope: Scope, headers: Headers, spec: RouteSpec | None) -> str | None:
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
    if scope["method"] == "GET" and spec is not None and spec.stream and scope.get("query_string"):
        tokens = parse_qs(scope["query_string"].decode("latin-1"), keep_blank_values=True).get("access_token")
        if tokens is not None:
            if len(tokens) != 1 or not tokens[0]:
                raise _NoKey("send one non-empty access_token", invalid=True)
            return str(tokens[0])
    return None


class Authenticator(Guard):
    """Refuses requests without a key in force, or without its scope (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, keys: Callable[[], KeyRing]) -> None:
        super().__init__(app)
        self.keys = keys

    def _key(self, scope: Scope, headers: Headers, spec: RouteSpec | None) -> ApiKey:
        secret = _presented(scope, headers, spec)
        if secret is None:
            raise _NoKey(f"this route needs a key: send Authorization: Bearer <key> ({HOW_TO_GET_ONE})", invalid=False)
        key = self.keys().find(secret)
        if key is None:
            raise _NoKey(
                "the key is not one this service knows (revoked, mistyped, or from another keys file)", invalid=True
            )
        return key

    async def refused(self, scope: Scope, send: Send) -> bool:
        """Whether the HTTP request was refused (its answer sent); else its key, if any, is in its state."""
        headers = Headers(scope=scope)
        matched = matched_route(scope)
        spec = spec_of(matched.full)
        wanted = required_scope(scope["method"], matched)
        if wanted is None:
            with contextlib.suppress(_NoKey):
                scope.setdefault("state", {})[KEY_STATE] = self._key(scope, headers, spec)
            return False
        try:
            key = self._key(scope, headers, spec)
        except _NoKey as refusal:
            await _refuse_unauthenticated(scope, send, refusal)
            return True
        if not key.allows(wanted):
            detail = f"key {key.id!r} lacks the {wanted.value!r} scope this request needs"
            await send_problem(scope, send, ErrorCode.FORBIDDEN, detail)
            return True
        scope.setdefault("state", {})[KEY_STATE] = key
        return False


def challenge(*, invalid: bool) -> str:
    """The ``WWW-Authenticate`` value of a 401; ``invalid`` when a key was sent (RFC 6750: ``invalid_token``)."""
    return 'Bearer realm="forklog"' + (', error="invalid_token"' if invalid else "")


async def _refuse_unauthenticated(scope: Scope, send: Send, refusal: _NoKey) -> None:
    headers = {"WWW-Authenticate": challenge(invalid=refusal.invalid)}
    await send_problem(scope, send, ErrorCode.UNAUTHENTICATED, refusal.detail, headers=headers)
