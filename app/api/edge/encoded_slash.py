"""A path with an encoded slash (``%2F``) is refused before routing: in a session id it is a malformed id (which
would otherwise reach the routes decoded, as two segments), elsewhere no route has such a segment."""

from __future__ import annotations

from starlette.types import Scope, Send

from app.api.edge.guard import Guard
from app.api.wire.problems import send_problem
from app.domain.errors import ErrorCode

__all__ = ["EncodedSlashGuard"]


class EncodedSlashGuard(Guard):
    async def refused(self, scope: Scope, send: Send) -> bool:
        """Whether the HTTP request was refused (its answer sent)."""
        return await _refused_encoded_slash(scope, send)


async def _refused_encoded_slash(scope: Scope, send: Send) -> bool:
    raw_path: bytes = (scope.get("raw_path") or scope["path"].encode()).split(b"?", 1)[0]
    # find, not ``in``: bytes' ``in`` tries its operand as an integer first, making and dropping a TypeError each time.
    if raw_path.find(b"%2f") < 0 and raw_path.find(b"%2F") < 0:
        return False
    segments = raw_path.split(b"/")
    if len(segments) > 2 and segments[1] == b"sessions" and b"%2f" in segments[2].lower():
        detail = "the session id must not contain '/'"
        await send_problem(scope, send, ErrorCode.INVALID_REQUEST, detail, {"field": "id", "reason": detail})
    else:  # an encoded slash is a character of its segment: no route has such a segment
        await send_problem(scope, send, ErrorCode.NOT_FOUND, f"no route {raw_path.decode('latin-1')}; check the URL")
    return True
