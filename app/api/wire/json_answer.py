"""A JSON answer built from header lines as the server sends them (every append's answer is one)."""

from __future__ import annotations

from starlette.responses import Response

__all__ = ["JsonAnswer"]


class JsonAnswer(Response):
    """A JSON answer whose header lines are given as the server sends them: what Starlette's ``Response`` would send
    for ``Response(body, status, headers, media_type="application/json")``, the given lines first, without turning
    a mapping of text into lines on every append."""

    media_type = "application/json"

    def __init__(self, body: bytes, status: int = 200, lines: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        self.status_code = status
        self.background = None
        self.body = body
        length = [] if status < 200 or status in (204, 304) else [(b"content-length", b"%d" % len(body))]
        self.raw_headers = [*lines, *length, (b"content-type", b"application/json")]
