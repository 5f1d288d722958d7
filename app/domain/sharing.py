"""Read-only share links (spec 18): what a share is, its token, and what a reader of it is shown.

A share's token is shown once; the store keeps only its SHA-256 (:func:`token_digest`), and a token presented is
hashed and looked up by that digest, never by the token itself. The digest found is compared again with
``hmac.compare_digest`` (:func:`same_digest`), as keys are (:mod:`app.domain.access`).

Redaction is a pure function of an event (:func:`redact_event`) or of a model-history message
(:func:`redact_message`): it never changes a seq, a type or an event's place, so a shared page keeps the log's shape
and a fork of a share is a valid log whose redacted content stays redacted.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.domain.dsh_records import loads_stored
from app.domain.jsonvalue import dumps
from app.domain.limits import BadLimit, parse_duration_ms

__all__ = [
    "DEFAULT_EXPIRES_IN",
    "LIVE",
    "MAX_EXPIRES_MS",
    "REDACTED",
    "Redaction",
    "ShareRecord",
    "expires_in_ms",
    "new_share_id",
    "new_token",
    "parse_redactions",
    "redact_event",
    "redact_line",
    "redact_lines",
    "redact_message",
    "same_digest",
    "token_digest",
]

# 256 random bits, URL-safe (spec 18 asks for at least 128).
TOKEN_BYTES = 32
REDACTED = "[redacted]"
DEFAULT_EXPIRES_IN = "P30D"
MAX_EXPIRES_MS = 365 * 24 * 60 * 60 * 1000
# The answer's upTo of a share that follows its session as it grows.
LIVE = "live"
_SHARE_ID = re.compile(r"share-[0-9a-f]{16}")


class Redaction(StrEnum):
    REASONING = "reasoning"  # reasoning content blocks and reasoning chunks
    TOOLS = "tools"  # tool calls' arguments and tool results' content
    CWD = "cwd"  # the header's cwd
    META = "meta"  # every header member but createdAt and title


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One share as the store keeps it: never the token, only its SHA-256 (``digest``, 64 hex digits).

    ``instance`` is the session incarnation it shares: a share never outlives its session (a session made anew
    under the same id is another incarnation, which no share of the old one reaches). ``up_to`` is the ``turn/end``
    seq it is frozen at, None for a live share. Times are epoch ms."""

    id: str
    tenant: str
    session_id: str
    instance: str
    digest: str
    up_to: int | None
    redact: frozenset[Redaction]
    created_at: int
    expires_at: int

    def expired(self, now: int) -> bool:
        return now >= self.expires_at


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def new_share_id() -> str:
    return f"share-{secrets.token_hex(8)}"


def is_share_id(text: str) -> bool:
    return _SHARE_ID.fullmatch(text) is not None


def token_digest(token: str) -> str:
    """The SHA-256 of any presented text (a malformed token too: every token takes the same path)."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def same_digest(stored: str, presented: str) -> bool:
    return hmac.compare_digest(stored.encode("ascii"), presented.encode("ascii"))


def expires_in_ms(text: Any) -> int:
    """``expiresIn`` (an ISO 8601 duration, at most P365D) in ms; :class:`BadLimit` saying why not."""
    duration = parse_duration_ms(text)
    if duration > MAX_EXPIRES_MS:
        raise BadLimit("must be at most P365D")
    return duration


def parse_redactions(value: Any) -> frozenset[Redaction]:
    """``redact``: a list of distinct names of :class:`Redaction`; ValueError naming what is wrong."""
    if not isinstance(value, list):
        raise ValueError("must be an array of reasoning, tools, cwd, meta")
    known = {member.value for member in Redaction}
    found: set[Redaction] = set()
    for name in value:
        if not isinstance(name, str) or name not in known:
            raise ValueError(f"unknown member {name!r}: each must be one of reasoning, tools, cwd, meta")
        found.add(Redaction(name))
    return frozenset(found)


# -- redaction ---------------------------------------------------------------------------------------------------

_REDACTED_CONTENT: list[dict[str, Any]] = [{"type": "text", "text": REDACTED}]


def _redacted_block(block: Any, redact: frozenset[Redaction]) -> Any:
    """A content block of a message (or a chunk's finished block) as a reader of the share sees it."""
    if not isinstance(block, dict):
        return block
    kind = block.get("type")
    if kind == "reasoning" and Redaction.REASONING in redact:
        # Only the type stays: a signature or provider data may encode the reasoning itself.
        return {"type": "reasoning", "text": REDACTED}
    if Redaction.TOOLS in redact:
        if kind == "tool-call" and "arguments" in block:
            return {**block, "arguments": REDACTED}
        if kind == "tool-result":
            return {**block, "content": [dict(part) for part in _REDACTED_CONTENT]}
    return block


def redact_message(message: Any, redact: frozenset[Redaction]) -> Any:
    """A message (of a surface event, or of the model history) with its redacted blocks replaced."""
    if not redact or not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    return {**message, "content": [_redacted_block(block, redact) for block in message["content"]]}


def _redacted_chunk(chunk: Any, redact: frozenset[Redaction]) -> Any:
    if not isinstance(chunk, dict):
        return chunk
    kind = chunk.get("type")
    if kind == "reasoning-delta" and Redaction.REASONING in redact:
        return {**chunk, "text": REDACTED}
    if kind == "tool-call-delta" and Redaction.TOOLS in redact and "argumentsDelta" in chunk:
        return {**chunk, "argumentsDelta": REDACTED}
    if kind == "block-end" and "block" in chunk:
        return {**chunk, "block": _redacted_block(chunk["block"], redact)}
    return chunk


def redact_event(event: Any, redact: frozenset[Redaction]) -> Any:
    """The event as a reader of a share redacting ``redact`` sees it (a new value: ``event`` is not changed).

    ``reasoning``: the reasoning blocks of messages and finished chunks, and reasoning deltas, hold ``[redacted]``.
    ``tools``: a ``tool/call``'s and a tool-call block's ``arguments``, a tool-call delta's ``argumentsDelta`` are
    ``[redacted]``; a tool result's content is one text block ``[redacted]``, and the result's ``meta`` (diffs of
    what the tool changed) is left out. Every other member, and every other event, is as stored."""
    if not redact or not isinstance(event, dict) or not isinstance(event.get("data"), dict):
        return event
    kind, data = event.get("type"), event["data"]
    tools = Redaction.TOOLS in redact
    if kind == "assistant/message" or kind == "tool/result":
        changed = {**data, "message": redact_message(data["message"], redact)} if "message" in data else dict(data)
        if kind == "tool/result" and tools:
            changed.pop("meta", None)
            if isinstance(changed.get("content"), list):  # DSH's older tool/result shape: the content in data
                changed["content"] = [dict(part) for part in _REDACTED_CONTENT]
        return {**event, "data": changed}
    if kind == "user/message":
        return {**event, "data": redact_message(data, redact)}
    if kind == "assistant/chunk" and "chunk" in data:
        return {**event, "data": {**data, "chunk": _redacted_chunk(data["chunk"], redact)}}
    if kind == "tool/call" and tools and "arguments" in data:
        return {**event, "data": {**data, "arguments": REDACTED}}
    return event


def redact_line(line: bytes, redact: frozenset[Redaction]) -> bytes:
    """One stored event line (no newline) as :func:`redact_event` shows it; the line itself when nothing changes."""
    if not (redact & {Redaction.REASONING, Redaction.TOOLS}):
        return line
    event, _ = loads_stored(line)
    shown = redact_event(event, redact)
    return line if shown is event else dumps(shown)


def redact_lines(lines: bytes, redact: frozenset[Redaction]) -> bytes:
    """Stored JSONL lines (each with its newline) as a reader of the share sees them."""
    if not (redact & {Redaction.REASONING, Redaction.TOOLS}) or not lines:
        return lines
    return b"".join(redact_line(line, redact) + b"\n" for line in lines.splitlines())


def redaction_names(redact: Iterable[Redaction]) -> list[str]:
    """``redact`` as the answer lists it, in the spec's order."""
    chosen = set(redact)
    return [member.value for member in Redaction if member in chosen]
