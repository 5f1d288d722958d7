"""A guard: a check made before a request reaches its route, which answers the request itself when it fails.

The gateway (:mod:`app.api.fast_path.gateway`) calls each guard's :meth:`Guard.refused` in turn. A guard is also an ASGI
layer of its own, for an app built around one: it refuses WebSocket handshakes, passes the lifespan through, and lets an
HTTP request on only when :meth:`Guard.refused` did not answer it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Guard", "handled_outside_http", "refuse_websocket"]


async def refuse_websocket(send: Send) -> None:
    """Close a WebSocket handshake unaccepted (the server answers 403): the service accepts no upgrade (spec 9).
    Nothing is logged here: the handshake's URL may carry ``?access_token=``."""
    await send({"type": "websocket.close", "code": 1008})


async def handled_outside_http(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> bool:
    """Whether ``scope`` is not an HTTP request, and has been handled: a WebSocket handshake refused, the lifespan
    passed to ``app``."""
    if scope["type"] == "http":
        return False
    if scope["type"] == "websocket":
        await refuse_websocket(send)
    else:
        await app(scope, receive, send)
    return True


class Guard:
    """Refuses the HTTP requests :meth:`refused` answers; passes the others to ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await handled_outside_http(self.app, scope, receive, send) and not await self.refused(scope, send):
            await self.app(scope, receive, send)

    async def refused(self, scope: Scope, send: Send) -> bool:
        """Whether the HTTP request was refused (its answer sent through ``send``)."""
        raise NotImplementedError
