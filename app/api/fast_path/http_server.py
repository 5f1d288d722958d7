"""Serving the app with uvicorn, with the client limits uvicorn itself lacks.

uvicorn bounds bodies only through the app and has no setting for the size of a request's header block or for a
client that stops sending its headers (its ``timeout_keep_alive`` applies between requests only, and upstream issue
encode/uvicorn#157 is still open). :func:`limited_protocol` adds both to uvicorn's own httptools protocol, through
the server's documented ``http=`` protocol-class setting: a header block over ``max_header_bytes`` answers 431, and
one not whole ``read_timeout`` seconds after the connection opened (on a kept-alive connection: after the request's
first byte) answers 408, in total and whatever the client's pace (a byte now and then does not move the deadline);
both as problem+json, and the connection is closed. A body that stops arriving is the app's to time out (it reads
the body): see :mod:`app.api.wire.body`; the protocol marks a request whose whole body has arrived (``BODY_ARRIVED``),
so that reading it arms no deadline. Shutdown uses uvicorn's ``timeout_graceful_shutdown``. WebSocket is off.

uvicorn writes an answer's status line and headers, then its body, each as it comes: for a small answer (an append's)
two system calls and two wake-ups of the client instead of one, a measurable share of a request's CPU. The protocol's
writes go through :class:`CoalescingTransport`, which sends what one step of the event loop wrote as one write.

The served process collects its youngest generation less often than Python's default (:data:`YOUNG_GENERATION`): see
:func:`serve`.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
from collections.abc import Callable
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from app.api.settings import Settings
from app.api.telemetry.request_ids import new_request_id
from app.api.wire.body import BODY_ARRIVED
from app.api.wire.problems import PROBLEM_JSON, problem_body
from app.domain.errors import ErrorCode

__all__ = ["CoalescingTransport", "ForklogServer", "limited_protocol", "serve"]

log = logging.getLogger("forklog.http")

HEADER_END = b"\r\n\r\n"
# How long a refused client may go on sending before its connection is closed anyway.
LINGER_SECONDS = 2.0
# A write this large goes out at once (after what is pending): joining it would copy it for nothing. Pending writes
# that add up to this much go out at once too: the transport's own buffer (and uvicorn's flow control, which pauses
# a streaming answer when the client reads slowly) must see them.
COALESCED_BYTES = 64 * 1024
# Container objects allocated (less those freed) before the cyclic collector walks its youngest generation. Python's
# 700 is below what the requests waiting on one sync round or commit keep alive (about a hundred each): the round's
# end frees them all at once while the allocation count stops at zero, so the next requests' allocations run it up
# again, and a collection walked every waiting request's objects about once a round (some 5% of an append's CPU).
# This many covers a few hundred waiting requests; the cyclic garbage it lets wait (error paths make some) is a few
# megabytes at most.
YOUNG_GENERATION = 50_000


class CoalescingTransport:
    """A connection's transport whose writes of one event-loop step leave as one write, at the end of that step
    (before a close or an end of writing, at once). Everything else is the transport's own."""

    __slots__ = ("_loop", "_pending", "_pending_bytes", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def write(self, data: bytes) -> None:
        if len(data) >= COALESCED_BYTES:
            self.flush()
            self._transport.write(data)
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= COALESCED_BYTES:
            self.flush()

    def flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        data = pending[0] if len(pending) == 1 else b"".join(pending)
        pending.clear()
        self._pending_bytes = 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._pending_bytes = 0
        self._transport.abort()

    def is_closing(self) -> bool:
        # Here, not through __getattr__: uvicorn asks once a request, and a name found only by __getattr__ costs a
        # formatted AttributeError first.
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def limited_protocol(*, max_header_bytes: int, read_timeout: float) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, refusing header blocks over ``max_header_bytes`` and stalled headers."""

    class LimitedProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_headers = True
            self._header_bytes = 0
            self._tail = b""
            self._header_timer: asyncio.TimerHandle | None = None
            self._discarding = False

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            # Answers are written through it (uvicorn hands self.transport to each request's cycle).
            self.transport = CoalescingTransport(transport, self.loop)  # type: ignore[assignment]
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._discarding:
                return
            if self._in_headers:
                # Count only the header block: the end marker may sit inside this chunk, a body after it.
                window = self._tail + data
                end = window.find(HEADER_END)
                counted = len(data) if end < 0 else max(0, end + len(HEADER_END) - len(self._tail))
                self._header_bytes += counted
                if self._header_bytes > max_header_bytes:
                    self._refuse(
                        431,
                        ErrorCode.HEADERS_TOO_LARGE,
                        f"the request line and headers exceed {max_header_bytes} bytes; send smaller headers",
                    )
                    return
                self._tail = window[-(len(HEADER_END) - 1) :]
            super().data_received(data)
            if self._in_headers and self._header_bytes and self._header_timer is None:
                # A request's headers began and are not whole yet: their deadline starts now. Headers that end in
                # the chunk they began in (nearly every request's) arm no timer: one set and cancelled per request
                # was a measurable share of an append.
                self._arm()

        def on_headers_complete(self) -> None:
            self._in_headers = False
            self._disarm()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self.scope[BODY_ARRIVED] = True  # type: ignore[literal-required]
            # The next request on this connection starts with its headers; its timer starts with its first byte.
            self._in_headers = True
            self._header_bytes = 0
            self._tail = b""

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(read_timeout, self._headers_stalled)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_stalled(self) -> None:
            self._header_timer = None
            if not self._in_headers or self.transport.is_closing():
                return
            if self._header_bytes == 0:  # an idle connection that never began a request: close it quietly
                self.transport.close()
                return
            self._refuse(
                408,
                ErrorCode.REQUEST_TIMEOUT,
                f"the request's headers did not arrive within {read_timeout:g} s; send the whole request at once",
            )

        def _unsupported_upgrade_warning(self) -> None:
            # uvicorn's warning advises installing a WebSocket library; this service takes no upgrade by design.
            log.debug("a request asked to upgrade its connection; served as plain HTTP")

        def _refuse(self, status: int, code: ErrorCode, detail: str) -> None:
            self._disarm()
            self._in_headers = False
            busy = self.cycle is not None and not self.cycle.response_complete
            if busy:  # an answer to an earlier request is still being written: only closing is safe
                self.transport.close()
                return
            log.warning("refused a request: %s", detail)
            request_id = new_request_id()  # the request's own headers never arrived whole: a new id
            body = orjson.dumps(problem_body(code, detail, "", None, request_id=request_id))
            headers = (
                f"content-type: {PROBLEM_JSON}\r\ncontent-length: {len(body)}\r\nx-request-id: {request_id}\r\n"
                "connection: close\r\n\r\n"
            )
            self.transport.write(STATUS_LINE[status] + headers.encode("ascii") + body)
            # Close gently: a close with unread bytes in the kernel's buffer resets the connection, and the
            # client would lose the answer. Send FIN, discard what still arrives, close when the client does.
            self._discarding = True
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)

    return LimitedProtocol


class ForklogServer(uvicorn.Server):
    """uvicorn's server, telling the app when a shutdown begins: open streams and long-polls end at once instead of
    holding the shutdown for its whole grace period (uvicorn itself only waits for them, then cancels them)."""

    def __init__(self, config: uvicorn.Config, on_stopping: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stopping = on_stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_stopping()
        await super().shutdown(sockets)


def serve(app: FastAPI, settings: Settings) -> None:
    """Run ``app`` until SIGINT/SIGTERM; a shutdown waits at most ``settings.shutdown_grace`` for requests."""
    gc.set_threshold(YOUNG_GENERATION, *gc.get_threshold()[1:])
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        server_header=False,
        http=limited_protocol(max_header_bytes=settings.max_header_bytes, read_timeout=settings.read_timeout),
        # No WebSocket (spec 9): uvicorn would otherwise accept the handshake and log its URL, which for the stream
        # carries ?access_token=. An Upgrade request is served as the plain HTTP request it also is.
        ws="none",
        timeout_graceful_shutdown=settings.shutdown_grace,
    )
    ForklogServer(config, on_stopping=app.state.service.stopping).run()
