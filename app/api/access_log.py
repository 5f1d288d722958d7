"""Every request logged as one JSON line (method, path, status, duration; never a body or a query string), and a
path with an encoded slash refused before routing (in a session id it is a malformed id, elsewhere no route)."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import send_problem
from app.domain.errors import ErrorCode

__all__ = ["AccessLog"]

logger = logging.getLogger("forklog.access")


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if not await _refused_encoded_slash(scope, send_and_note):
                await self.app(scope, receive, send_and_note)
        finally:
            if logger.isEnabledFor(logging.INFO):
                record: dict[str, Any] = {
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status,
                    "ms": round((time.perf_counter() - started) * 1000, 3),
                }
                logger.info(orjson.dumps(record).decode())


async def _refused_encoded_slash(scope: Scope, send: Send) -> bool:
    raw_path: bytes = (scope.get("raw_path") or scope["path"].encode()).split(b"?", 1)[0]
    if b"%2f" not in raw_path.lower():
        return False
    segments = raw_path.split(b"/")
    if len(segments) > 2 and segments[1] == b"sessions" and b"%2f" in segments[2].lower():
        detail = "the session id must not contain '/'"
        await send_problem(scope, send, ErrorCode.INVALID_REQUEST, detail, {"field": "id", "reason": detail})
    else:  # an encoded slash is a character of its segment: no route has such a segment
        await send_problem(scope, send, ErrorCode.NOT_FOUND, f"no route {raw_path.decode('latin-1')}; check the URL")
    return True
