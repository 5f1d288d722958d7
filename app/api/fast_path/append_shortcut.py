"""Appends, the hot path, reach their route without the router and the framework's layers around it.

Everything outside this layer (the access log, CORS, the key check or the loopback guard, the encoded-slash guard)
has run already; what is skipped is the walk over the route table and the framework's per-request layers, about as
much CPU as the append itself. The request is matched by the documented route's own ``matches`` (Starlette's), so
the shortcut takes exactly the requests the router would give that route, and any other goes on to the router. The
route's own function answers, and an error is answered by the handler the app has registered for it, looked up by
Starlette itself (the route's own error handling) from the handlers its ``ExceptionMiddleware`` would have given it.
"""

from __future__ import annotations

from typing import Any

# A private module, kept on purpose: it is the very code ExceptionMiddleware runs for a route, so an error here is
# answered exactly as through the router (tests/api/test_append_shortcut.py compares both paths for every error);
# a copy of it would drift from Starlette's handler lookup instead.
from starlette._exception_handler import wrap_app_handling_exceptions
from starlette.requests import Request
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.routing.calling import PlainRoute

__all__ = ["AppendShortcut"]

# Where Starlette's ExceptionMiddleware leaves the app's handlers for a route's own error handling.
_HANDLERS = "starlette.exception_handlers"


class AppendShortcut:
    def __init__(self, app: ASGIApp, *, route: PlainRoute) -> None:
        self.app = app
        self.route = route
        self.endpoint = route.endpoint
        self._handlers: tuple[dict[Any, Any], dict[int, Any]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        match, child_scope = self.route.matches(scope)
        if match is not Match.FULL:
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route  # as the router notes it (metrics, traces)
        scope.update(child_scope)
        request = Request(scope, receive)
        try:
            response = await self.endpoint(request)
        except Exception as exc:
            # Rare: the route's own error handling (Starlette's lookup of the app's handler for ``exc``). The common
            # case skips its wrappers, a measurable share of an append's CPU.
            scope[_HANDLERS] = self._handlers or self._app_handlers(scope)
            await wrap_app_handling_exceptions(_raising(exc), request)(scope, receive, send)
            return
        await response(scope, receive, send)

    def _app_handlers(self, scope: Scope) -> tuple[dict[Any, Any], dict[int, Any]]:
        """The app's handlers as ExceptionMiddleware splits them: by exception class, and by HTTP status."""
        registered: dict[Any, Any] = scope["app"].exception_handlers
        by_class = {key: handler for key, handler in registered.items() if not isinstance(key, int)}
        by_status = {key: handler for key, handler in registered.items() if isinstance(key, int)}
        self._handlers = (by_class, by_status)
        return self._handlers


def _raising(exc: Exception) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise exc

    return app
