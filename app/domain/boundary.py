"""The RFC's boundary rule: where a snapshot or a fork may take its seed (spec 2.3).

Without ``atSeq`` the seed is the whole log, which must be empty or end in a ``turn/end``; with ``atSeq`` it is
``events[0..atSeq]``, and event ``atSeq`` must be a ``turn/end``. Nothing is ever clipped: a log inside a turn is
refused, with what the client needs to pick a boundary.
"""

from __future__ import annotations

from typing import Any

from app.domain.errors import ErrorCode, SessionForkError
from app.domain.session import Session

__all__ = ["fork_lineage", "seed_length"]


def seed_length(source: Session, at_seq: int | None, *, at_turn_end: bool) -> int:
    """How many events of ``source`` the seed holds, or the :class:`SessionForkError` the rule names.

    ``at_turn_end`` says whether the stored event ``at_seq`` is a ``turn/end`` (when it exists).
    """
    head = source.head
    count = head.count
    if at_seq is None:
        if head.forkable:
            return count
        raise SessionForkError(
            ErrorCode.NOT_AT_TURN_BOUNDARY,
            f'session "{source.id}" is not at a turn boundary (last event: {head.last_type}); wait for turn/end, '
            "or pass atSeq = lastTurnEndSeq",
            lastEventType=head.last_type,
            openTurn=head.open_turn,
            lastTurnEndSeq=head.last_turn_end_seq,
        )
    if at_seq < 0 or at_seq >= count:
        last = "none" if count == 0 else str(count - 1)
        raise SessionForkError(
            ErrorCode.INVALID_BOUNDARY,
            f'atSeq {at_seq} does not exist in session "{source.id}" (last seq: {last}); pick a turn/end seq',
        )
    if at_seq != head.last_turn_end_seq and not at_turn_end:
        raise SessionForkError(
            ErrorCode.INVALID_BOUNDARY,
            f'atSeq {at_seq} in session "{source.id}" is not a turn/end; pick a turn/end seq',
        )
    return at_seq + 1


def fork_lineage(source: Session, seed_count: int) -> dict[str, Any]:
    """The child's ``meta`` (spec 2.3): its parent, its seed's length, and the parent's ``cwd`` if it has one."""
    meta: dict[str, Any] = {"parentSession": source.id, "seedLength": seed_count}
    if source.header.cwd is not None:
        meta["cwd"] = source.header.cwd
    return meta
