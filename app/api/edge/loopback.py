"""A service without keys serves only its own machine: no other site's page can drive it from a browser.

Two checks run before any route (spec section 9, "Loopback without keys"):

- **Host.** Only a ``Host`` naming a loopback address (127.0.0.0/8, ::1), ``localhost`` (or a name under it), or one
  of ``FORKLOG_ALLOWED_HOSTS`` is served; any other answers ``400 INVALID_REQUEST`` (``field: "Host"``). A page that
  rebinds its own DNS name to 127.0.0.1 still sends its own name, so it is refused (DNS rebinding).
- **Origin.** A request that changes something (any method but GET, HEAD and OPTIONS, except a snapshot, which
  only reads) and carries an ``Origin`` not listed in ``FORKLOG_CORS_ORIGINS`` answers ``403 FORBIDDEN`` before it
  runs: a cross-site form or ``fetch`` (a "simple" request needs no preflight) cannot create, append, fork or delete.
  The service's own origin (the scheme and the ``Host`` just accepted) is not another site: only a page this
  service served (the session browser at ``/ui/``, the docs at ``/docs``) sends it, so those pages may fork and
  delete. A rebinding page sends its own name as ``Host`` and is refused above; a page of another local port sends
  an origin with that port.

Starlette's ``TrustedHostMiddleware`` is not used: its refusal is plain text (every forklog error is a problem) and
it cannot name the whole 127.0.0.0/8 range.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Scope, Send

from app.api.edge.guard import Guard
from app.api.routing.declarations import matched_route, spec_of
from app.api.wire.problems import send_problem
from app.api.wire.raw_headers import first_values
from app.domain.access import Scope as KeyScope
from app.domain.errors import ErrorCode

__all__ = ["LoopbackGuard", "host_name", "is_allowed_host"]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header value (port and IPv6 brackets taken off), lower case; None if malformed."""
    value = header.strip().lower()
    if value.startswith("["):
        closing = value.find("]")
        if closing < 0 or (closing + 1 < len(value) and value[closing + 1] != ":"):
            return None
        return value[1:closing] or None
    name, colon, port = value.rpartition(":")
    if colon and port.isdigit():
        value = name
    if not value or any(char in value for char in "/@ \t[]"):
        return None
    return value.rstrip(".") or None


def is_allowed_host(name: str, allowed: Iterable[str]) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        if ipaddress.ip_address(name).is_loopback:
            return True
    except ValueError:
        pass
    return any(name == pattern or (pattern.startswith("*.") and name.endswith(pattern[1:])) for pattern in allowed)


def _reads_only(scope: Scope) -> bool:
    """A safe method, or a route declared to need no more than ``read`` (a snapshot)."""
    if scope["method"] in SAFE_METHODS:
        return True
    spec = spec_of(matched_route(scope).full)
    return spec is not None and spec.scope in (None, KeyScope.READ)


class LoopbackGuard(Guard):
    """Refuses foreign ``Host`` values and cross-site changes (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Iterable[str], allowed_origins: Iterable[str]) -> None:
        super().__init__(app)
        self.allowed_hosts = tuple(allowed_hosts)
        self.allowed_origins = frozenset(origin.lower() for origin in allowed_origins)
        # Clients send the same few Host values again and again; bounded, since a client may send any.
        self.serves = functools.lru_cache(maxsize=256)(self._serves)

    def _serves(self, raw_host: str | None) -> bool:
        name = host_name(raw_host) if raw_host is not None else None
        return name is not None and is_allowed_host(name, self.allowed_hosts)

    async def refused(self, scope: Scope, send: Send) -> bool:
        """Whether the HTTP request was refused (its answer sent)."""
        raw_host, origin = first_values(scope["headers"], b"host", b"origin")
        if not self.serves(raw_host):
            reason = "this service without keys answers only requests for a loopback address or localhost"
            await send_problem(
                scope,
                send,
                ErrorCode.INVALID_REQUEST,
                f"Host {raw_host!r} is not served: {reason} (or one of FORKLOG_ALLOWED_HOSTS)",
                {"field": "Host", "reason": reason},
                status=400,
            )
            return True
        if origin is None:
            return False
        own_origin = f"{scope.get('scheme', 'http')}://{raw_host}".lower()
        refused_origin = origin.lower() not in self.allowed_origins | {own_origin}
        if refused_origin and not _reads_only(scope):
            await send_problem(
                scope,
                send,
                ErrorCode.FORBIDDEN,
                f"a page from {origin!r} may not change sessions here; list its origin in FORKLOG_CORS_ORIGINS "
                "to allow it",
            )
            return True
        return False
