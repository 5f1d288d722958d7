"""A fork's boundary: an ``atSeq`` checked by the boundary rule (spec 2.3), or one named by a turn number or by an
assistant message (spec 12), found as the seq of its ``turn/end`` and then checked like an ``atSeq``.

The log is read backwards a batch of events at a time through the storage seam, so every backend answers alike; a
batch's lines are searched for the bytes the wanted events must hold (a fast scan) and only the lines found are
parsed. A fork usually names a recent turn, so few batches are read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from app.backends.base import Backend
from app.domain.boundary import seed_length
from app.domain.errors import ErrorCode, SessionForkError
from app.domain.jsonvalue import dumps
from app.domain.session import Session

__all__ = ["message_turn_end", "seed_length_at", "turn_end_of"]

# Events read per batch while looking for a boundary.
BATCH_EVENTS = 2048

_MESSAGE_TYPES = frozenset({"user/message", "assistant/message"})


async def seed_length_at(backend: Backend, source: Session, at_seq: int | None) -> int:
    """The boundary rule (spec 2.3) on ``source`` as it is: the length of the seed that ends at ``at_seq`` (the
    whole log without it), or the refusal."""
    at_turn_end = False
    if at_seq is not None and 0 <= at_seq < source.head.count and at_seq != source.head.last_turn_end_seq:
        at_turn_end = await backend.is_turn_end(source.key, at_seq)
    return seed_length(source, at_seq, at_turn_end=at_turn_end)


def _refused(source: Session, reason: str) -> SessionForkError:
    return SessionForkError(
        ErrorCode.INVALID_BOUNDARY, f'session "{source.id}": {reason}; pick another boundary', reason=reason
    )


async def _backwards(backend: Backend, source: Session, needle: bytes) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """The events holding ``needle`` in their stored line, last first."""
    stop = source.head.count
    while stop > 0:
        start = max(0, stop - BATCH_EVENTS)
        lines = (await backend.read(source.key, start, stop)).split(b"\n")[:-1]
        for offset in range(len(lines) - 1, -1, -1):
            if needle in lines[offset]:
                yield start + offset, orjson.loads(lines[offset])
        stop = start


def _is_number(value: Any, wanted: int) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == wanted


async def turn_end_of(backend: Backend, source: Session, turn: int) -> int:
    """The seq of the (last) ``turn/end`` whose ``data.turn`` is ``turn``."""
    async for seq, event in _backwards(backend, source, b'"turn/end"'):
        data = event.get("data")
        if event.get("type") == "turn/end" and isinstance(data, dict) and _is_number(data.get("turn"), turn):
            return seq
    raise _refused(source, f"no turn/end of turn {turn}")


async def message_turn_end(backend: Backend, source: Session, message_id: str) -> int:
    """The seq of the ``turn/end`` of the turn of the (last) ``assistant/message`` whose message's id is
    ``message_id``, when no user or assistant message follows it in that turn."""
    found: int | None = None
    async for seq, event in _backwards(backend, source, dumps(message_id)):
        if event.get("type") == "assistant/message" and _message_id(event) == message_id:
            found = seq
            break
    if found is None:
        raise _refused(source, f"no assistant/message has the message id {message_id!r}")
    after = await _first_after(backend, source, found + 1, lambda kind: kind == "turn/end" or kind in _MESSAGE_TYPES)
    if after is None:
        raise _refused(source, f"the turn of message {message_id!r} has not ended")
    seq, kind = after
    if kind != "turn/end":
        raise _refused(source, f"a {kind} follows message {message_id!r} within its turn")
    return seq


def _message_id(event: dict[str, Any]) -> Any:
    data = event.get("data")
    message = data.get("message") if isinstance(data, dict) else None
    return message.get("id") if isinstance(message, dict) else None


async def _first_after(
    backend: Backend, source: Session, start: int, wanted: Callable[[str], bool]
) -> tuple[int, str] | None:
    """The first event from ``start`` on whose type is ``wanted``, as (seq, type)."""
    count = source.head.count
    while start < count:
        stop = min(count, start + BATCH_EVENTS)
        lines = (await backend.read(source.key, start, stop)).split(b"\n")[:-1]
        for offset, line in enumerate(lines):
            kind = orjson.loads(line).get("type")
            if isinstance(kind, str) and wanted(kind):
                return start + offset, kind
        if not lines:
            return None
        start += len(lines)
    return None
