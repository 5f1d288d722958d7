"""The service takes no WebSocket (spec 9): both guards (keys, and the loopback guard without keys) close a handshake
unaccepted, before anything behind them sees it, and let the lifespan through."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.edge.auth import Authenticator
from app.api.edge.loopback import LoopbackGuard
from app.domain.access import KeyRing

PLANTED = "planted-key-0123456789"


class Inner:
    """The app behind a guard: notes every scope that reaches it."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.seen.append(scope["type"])


def guards(inner: Inner) -> list[ASGIApp]:
    return [
        Authenticator(inner, keys=KeyRing),
        LoopbackGuard(inner, allowed_hosts=(), allowed_origins=()),
    ]


def call(app: ASGIApp, scope: dict[str, Any]) -> list[Message]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(message: Message) -> None:
        sent.append(message)

    async def run() -> None:
        await app(scope, receive, send)

    asyncio.run(run())
    return sent


@pytest.mark.parametrize("guard", [0, 1], ids=["keys", "loopback"])
def test_a_websocket_handshake_is_closed_unaccepted_and_unlogged(guard: int, caplog: pytest.LogCaptureFixture) -> None:
    inner = Inner()
    scope = {
        "type": "websocket",
        "path": "/sessions/demo/events/stream",
        "raw_path": b"/sessions/demo/events/stream",
        "query_string": f"access_token={PLANTED}".encode(),
        "headers": [(b"host", b"localhost")],
    }
    with caplog.at_level(logging.DEBUG):
        sent = call(guards(inner)[guard], scope)
    assert inner.seen == [], "nothing behind the guard sees the handshake"
    assert [message["type"] for message in sent] == ["websocket.close"]
    assert PLANTED not in caplog.text


@pytest.mark.parametrize("guard", [0, 1], ids=["keys", "loopback"])
def test_the_lifespan_passes_the_guards(guard: int) -> None:
    inner = Inner()
    call(guards(inner)[guard], {"type": "lifespan"})
    assert inner.seen == ["lifespan"]
