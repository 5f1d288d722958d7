"""Reading a request's body: content type, size limit, a client that stops sending, lossless JSON.

The order is the contract's: a body that is not declared JSON is 415 before its size is looked at (413), and 413 is
decided before a byte is parsed. Its members are checked by :mod:`app.api.wire.requests`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from starlette.types import Receive

from app.api.wire.problems import RequestProblem, invalid_request
from app.api.wire.raw_headers import first_values
from app.domain.errors import ErrorCode
from app.domain.jsonvalue import Break, JsonSyntaxError, JsonTooDeep
from app.domain.jsonvalue import loads as lossless_loads

__all__ = ["BODY_ARRIVED", "PARSED_INLINE_BYTES", "JsonBody", "read_body"]

PARSED_INLINE_BYTES = 256 * 1024
# Set in a request's scope by the server's protocol (app.api.fast_path.http_server) once the whole body has been
# received: its reading then cannot stall, and skips the deadline (a timer armed and cancelled, a measurable share of an
# append).
BODY_ARRIVED = "forklog.body_arrived"


@dataclass(slots=True)
class JsonBody:
    """A parsed object body, the lossless breaks found in it (usually none), and its bytes as they came."""

    members: dict[str, Any]
    breaks: list[Break] = field(default_factory=list)
    raw: bytes = b""

    def element_breaks(self, member: str) -> dict[int, str]:
        """The first break inside each element of the array ``member``, by index."""
        found: dict[int, str] = {}
        for item in self.breaks:
            if len(item.path) >= 2 and item.path[0] == member and isinstance(item.path[1], int):
                found.setdefault(item.path[1], item.reason)
        return found

    def refuse_breaks_outside(self, member: str | None) -> None:
        """A break anywhere but inside an element of ``member`` makes the request malformed."""
        for item in self.breaks:
            if member is not None and len(item.path) >= 2 and item.path[0] == member and isinstance(item.path[1], int):
                continue
            where = ".".join(str(part) for part in item.path)
            raise invalid_request(where, item.reason, f"{where or 'the body'}: {item.reason}")


def _is_json_media_type(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/json":
        return True
    kind, _, subtype = media_type.partition("/")
    return kind == "application" and subtype.endswith("+json")


async def _read_raw(request: Request, *, limit: int, read_timeout: float, first_chunk_only: bool = False) -> bytes:
    """The body's bytes (only its first non-empty chunk with ``first_chunk_only``): 413 past ``limit``, 408 when the
    client sends nothing for ``read_timeout`` seconds (spec 9). One deadline for the whole read, moved on at each
    chunk: the common one-chunk body costs one timer."""
    receive = request.receive
    chunks: list[bytes] = []
    if request.scope.get(BODY_ARRIVED):
        await _receive_chunks(receive, chunks, limit=limit, first_chunk_only=first_chunk_only)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(read_timeout) as deadline:

            def moved_on() -> None:
                deadline.reschedule(loop.time() + read_timeout)

            await _receive_chunks(receive, chunks, limit=limit, first_chunk_only=first_chunk_only, moved_on=moved_on)
    except TimeoutError:
        raise RequestProblem(
            ErrorCode.REQUEST_TIMEOUT,
            f"the body stopped arriving for {read_timeout:g} s; send the whole request without pausing",
        ) from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _receive_chunks(
    receive: Receive,
    chunks: list[bytes],
    *,
    limit: int,
    first_chunk_only: bool,
    moved_on: Callable[[], None] | None = None,
) -> None:
    """The body's chunks into ``chunks`` (413 past ``limit``); ``moved_on`` is told of each chunk with more to come."""
    received = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise invalid_request("", "the client went away before sending the whole body")
        chunk: bytes = message.get("body", b"")
        if chunk:
            received += len(chunk)
            if received > limit:
                raise RequestProblem(
                    ErrorCode.PAYLOAD_TOO_LARGE, f"the body is over the limit of {limit} bytes; split it"
                )
            chunks.append(chunk)
            if first_chunk_only:
                return
        if not message.get("more_body", False):
            return
        if moved_on is not None:
            moved_on()


async def read_body(request: Request, *, limit: int, empty_is_object: bool, read_timeout: float = 30.0) -> JsonBody:
    """The request's JSON object body, or the problem the contract names for it."""
    content_type, declared_length = first_values(request.scope["headers"], b"content-type", b"content-length")
    length = (
        int(declared_length)
        if declared_length is not None and declared_length.isascii() and declared_length.isdigit()
        else None
    )
    is_json = content_type is None or _is_json_media_type(content_type)
    # A body not declared JSON is 415, except a 0-byte body where the route reads none as {} (spec 3).
    if not is_json and not (empty_is_object and length == 0):
        # With no length declared, a route that reads an empty body as {} looks for a first byte.
        may_be_empty = length is None and empty_is_object
        if may_be_empty and not await _read_raw(request, limit=limit, read_timeout=read_timeout, first_chunk_only=True):
            return JsonBody({})
        raise RequestProblem(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE, f"the body must be JSON (application/json), not {content_type}; send JSON"
        )
    if length is not None and length > limit:
        raise RequestProblem(
            ErrorCode.PAYLOAD_TOO_LARGE, f"the body is {length} bytes, over the limit of {limit}; split it"
        )
    raw = await _read_raw(request, limit=limit, read_timeout=read_timeout)
    if not raw:
        if empty_is_object:
            return JsonBody({})
        raise invalid_request("", "the body is empty; send a JSON object")
    try:
        if len(raw) > PARSED_INLINE_BYTES:
            # A large body is parsed in a worker thread so that the event loop keeps serving meanwhile.
            value, breaks = await asyncio.to_thread(lossless_loads, raw)
        else:
            value, breaks = lossless_loads(raw)
    except (JsonSyntaxError, JsonTooDeep) as exc:
        raise invalid_request("", str(exc)) from None
    root_break = next((item for item in breaks if item.path == ()), None)
    if root_break is not None:
        raise invalid_request("", root_break.reason)
    if not isinstance(value, dict):
        raise invalid_request("", "the body must be a JSON object")
    return JsonBody(value, breaks, raw)
