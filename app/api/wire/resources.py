"""What goes over the wire: the Session resource, list cursors, and JSON arrays made from stored JSONL lines."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import orjson

from app.api.wire.problems import invalid_request
from app.domain.dsh_records import encode_header
from app.domain.ids import is_valid_id
from app.domain.search import Match
from app.domain.session import HEADER_FIELDS, Session, SessionHeader
from app.domain.stats import SessionStats
from app.service.idempotency import Answer
from app.service.sessions import Appended

__all__ = [
    "SESSION_MEMBERS",
    "appended_answer",
    "created_answer",
    "decode_cursor",
    "encode_cursor",
    "json_array",
    "json_array_pieces",
    "match_json",
    "session_json",
    "session_payload",
]

# The Session resource's members, in the order they are written (spec 3, "The Session resource").
SESSION_MEMBERS: tuple[str, ...] = (
    "id",
    "instance",
    "createdAt",
    *(field.key for field in HEADER_FIELDS),
    "archived",
    "eventCount",
    "lastEventType",
    "openTurn",
    "lastTurnEndSeq",
    "forkable",
    "updatedAt",
    "title",
    "preview",
    "bytes",
    "stats",
    "usage",
    "ownUsage",
)


def session_json(session: Session) -> dict[str, Any]:
    """The Session resource: every member present, an absent header field as null."""
    header, head = session.header, session.head
    resource: dict[str, Any] = {"id": header.id, "instance": header.instance, "createdAt": header.created_at}
    for field in HEADER_FIELDS:
        resource[field.key] = getattr(header, field.attr)
    resource["archived"] = header.archived
    resource["eventCount"] = head.count
    resource["lastEventType"] = head.last_type
    resource["openTurn"] = head.open_turn
    resource["lastTurnEndSeq"] = head.last_turn_end_seq
    resource["forkable"] = head.forkable
    resource["updatedAt"] = session.updated_at
    resource["title"] = head.title
    resource["preview"] = head.preview
    resource["bytes"] = len(encode_header(header)) + head.body_bytes
    resource["stats"] = head.stats.view()
    resource["usage"] = dict(head.stats.usage)
    resource["ownUsage"] = dict(head.stats.own_usage)
    return resource


def match_json(match: Match) -> dict[str, Any]:
    """Where a search matched a session: ``{seq, snippet}``."""
    return {"seq": match.seq, "snippet": match.snippet}


def session_payload(session: Session) -> bytes:
    """:func:`session_json` encoded. The header's members come first and do not change while a session lives, so
    their bytes (and the header line's length) are kept per header: an append's answer encodes only its head."""
    header, head = session.header, session.head
    prefix, header_bytes = _header_part(header)
    return (
        prefix
        + orjson.dumps(
            {
                "eventCount": head.count,
                "lastEventType": head.last_type,
                "openTurn": head.open_turn,
                "lastTurnEndSeq": head.last_turn_end_seq,
                "forkable": head.forkable,
                "updatedAt": session.updated_at,
                "title": head.title,
                "preview": head.preview,
                "bytes": header_bytes + head.body_bytes,
            }
        )[1:-1]
        + _stats_part(head.stats)
    )


# The encoded figures of recent stats values, by identity (kept with the value, as _HEADER_PARTS keeps headers): an
# append that changes no figure (most streamed chunks) encodes none.
_STATS_PARTS: dict[int, tuple[SessionStats, bytes]] = {}
_STATS_PARTS_KEPT = 4096


def _stats_part(stats: SessionStats) -> bytes:
    """The Session resource's closing members from ``stats``: ``,"stats":{...},"usage":{...},"ownUsage":{...}}``."""
    kept = _STATS_PARTS.get(id(stats))
    if kept is not None and kept[0] is stats:
        return kept[1]
    part = b"," + orjson.dumps({"stats": stats.view(), "usage": stats.usage, "ownUsage": stats.own_usage})[1:]
    if len(_STATS_PARTS) >= _STATS_PARTS_KEPT:
        _STATS_PARTS.clear()
    _STATS_PARTS[id(stats)] = (stats, part)
    return part


# The encoded header members of recent headers, by identity (the header itself is kept, so an id is never reused
# while its entry lives); emptied when full.
_HEADER_PARTS: dict[int, tuple[SessionHeader, bytes, int]] = {}
_HEADER_PARTS_KEPT = 4096


def _header_part(header: SessionHeader) -> tuple[bytes, int]:
    """The Session resource's opening up to its header members (``{"id":...,"agentPreset":...,``), and the length
    of the header's stored line."""
    kept = _HEADER_PARTS.get(id(header))
    if kept is not None and kept[0] is header:
        return kept[1], kept[2]
    members: dict[str, Any] = {"id": header.id, "instance": header.instance, "createdAt": header.created_at}
    for field in HEADER_FIELDS:
        members[field.key] = getattr(header, field.attr)
    members["archived"] = header.archived
    prefix = orjson.dumps(members)[:-1] + b","
    if len(_HEADER_PARTS) >= _HEADER_PARTS_KEPT:
        _HEADER_PARTS.clear()
    header_bytes = len(encode_header(header))
    _HEADER_PARTS[id(header)] = (header, prefix, header_bytes)
    return prefix, header_bytes


def created_answer(session: Session) -> Answer:
    """The answer to a create or a fork: 201, the new session's Location and the Session resource."""
    return Answer(201, f"/sessions/{session.id}", session_payload(session))


def appended_answer(appended: Appended) -> Answer:
    """The answer to an append: 201 and ``{events, session}``, the events as stored."""
    body = b'{"events":' + json_array(appended.lines) + b',"session":' + session_payload(appended.session) + b"}"
    return Answer(201, None, body)


def json_array(lines: bytes) -> bytes:
    """Stored JSONL lines (each ending in a newline) as one JSON array, without parsing them: a stored line never
    holds a raw newline (JSON escapes them in strings), so newlines separate the events."""
    if not lines:
        return b"[]"
    return b"[" + lines[:-1].replace(b"\n", b",") + b"]"


_NEWLINES_TO_COMMAS = bytes.maketrans(b"\n", b",")


async def json_array_pieces(lines: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Stored JSONL lines, arriving in pieces cut anywhere, as the pieces of one JSON array: newline for comma is a
    byte for a byte, and the last newline closes nothing."""
    yield b"["
    pending = b""
    async for piece in lines:
        if pending:
            yield pending.translate(_NEWLINES_TO_COMMAS)
        pending = piece
    if pending:
        yield pending[:-1].translate(_NEWLINES_TO_COMMAS)
    yield b"]"


def encode_cursor(key: tuple[int, str], query: str | None = None) -> str:
    """The opaque cursor of a list page: the unpadded base64url of ``[value, id]`` of its last item (the order's
    value: createdAt or updatedAt), and of the digest of the query it belongs to unless it is the plain list."""
    members: list[Any] = [*key] if query is None else [*key, query]
    return base64.urlsafe_b64encode(orjson.dumps(members)).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple[tuple[int, str], str | None]:
    """A cursor's key and the digest of its query (None: the plain list)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, session_id, *query = orjson.loads(raw)
        if (
            isinstance(value, int)
            and not isinstance(value, bool)
            and is_valid_id(session_id)  # the last item's id: a cursor with another was never issued
            and (query == [] or (len(query) == 1 and isinstance(query[0], str)))
        ):
            return (value, session_id), query[0] if query else None
    except (ValueError, TypeError):
        pass
    raise invalid_request("cursor", "malformed cursor", "cursor is not one this service issued; start again without it")
