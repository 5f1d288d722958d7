"""Every request logged as one JSON line: method, path, status, duration, its request id and (when known) its trace
id; never a header, a body or a query string (a stream's ``?access_token=`` is a key)."""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.auth import KEY_STATE
from app.api.request_ids import REQUEST_ID_STATE

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
            await self.app(scope, receive, send_and_note)
        finally:
            if logger.isEnabledFor(logging.INFO):
                record: dict[str, Any] = {
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status,
                    "ms": round((time.perf_counter() - started) * 1000, 3),
                }
                state = scope.get("state", {})
                record["requestId"] = state.get(REQUEST_ID_STATE)
                trace_id = state.get("trace_id")  # app.api.telemetry.TRACE_ID_STATE, set outside this layer
                if trace_id is not None:
                    record["traceId"] = trace_id
                key = state.get(KEY_STATE)
                if key is not None:  # which key (its id and tenant, never the key)
                    record["key"] = key.id
                    record["tenant"] = key.tenant
                logger.info(orjson.dumps(record).decode())
