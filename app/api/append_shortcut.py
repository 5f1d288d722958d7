"""Appends, the hot path, reach their route's function without the router and the framework's layers around it.

Everything outside this layer (the access log, CORS, the key check or the loopback guard, the encoded-slash guard)
has run already; what is skipped is the walk over the route table and FastAPI's per-request machinery, about as
much CPU as the append itself. The documented route stays (the OpenAPI document, any path this does not match), it
runs the very same function, and an error is answered by the handler the app has registered for it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["APPEND_PATH", "AppendShortcut"]

# The route's path as Starlette's ``{id}`` (a ``str`` parameter: one segment) matches it.
APPEND_PATH = re.compile(r"/sessions/([^/]+)/events")

Endpoint = Callable[[Request], Awaitable[Response]]
Handler = Callable[[Request, Exception], Awaitable[Response]]


class AppendShortcut:
    def __init__(self, app: ASGIApp, *, endpoint: Endpoint) -> None:
        self.app = app
        self.endpoint = endpoint
        self._route: BaseRoute | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        match = APPEND_PATH.fullmatch(scope["path"])
        if match is None:
            await self.app(scope, receive, send)
            return
        scope["path_params"] = {"id": match[1]}
        scope["route"] = self._route or self._find_route(scope)  # as the router notes it (metrics, traces)
        request = Request(scope, receive)
        try:
            response = await self.endpoint(request)
        except Exception as exc:
            response = await _handler_for(request, exc)(request, exc)
        await response(scope, receive, send)

    def _find_route(self, scope: Scope) -> BaseRoute | None:
        """The documented route this shortcut stands for (found once)."""
        for route in scope["app"].router.routes:
            if getattr(route, "endpoint", None) is self.endpoint:
                self._route = route
        return self._route


def _handler_for(request: Request, exc: Exception) -> Handler:
    """The app's handler for ``exc``, found as Starlette's ExceptionMiddleware finds it (the nearest class)."""
    handlers: dict[Any, Handler] = request.app.exception_handlers
    for cls in type(exc).__mro__:
        if cls in handlers:
            return handlers[cls]
    raise exc  # none at all: the server's error middleware answers it, as for any route
