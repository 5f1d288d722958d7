"""Staging's vocabulary: a batch of events checked by the rules and what the log keeps beside their bytes, before
it is committed (:class:`StagedEvents`), and what a batch is checked against (:class:`LogTip`).

The checking itself is :mod:`app.domain.staging_rules`: the service stages every change, and the backends, which
store batches as they are given, import the types of this module, never those rules.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from app.domain.history import SurfaceChange
from app.domain.jsonvalue import dumps
from app.domain.log_state import NO_PENDING, LogState
from app.domain.stats import NO_STATS, SessionStats

__all__ = [
    "Checkpoint",
    "LogTip",
    "StagedEvents",
    "checkpoint",
    "encode_event",
    "join_staged",
    "replace_targets",
]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The invariant trace right after a ``turn/end`` (the rest of it is known: no turn or step is open), and the
    session's figures there (a fork's seed ending at it has them: spec 17)."""

    next_turn: Any
    next_step: Any
    pending: frozenset[Any]
    stats: SessionStats = NO_STATS

    def columns(self) -> list[Any]:
        """What a store keeps of it (read back by :func:`checkpoint`), the pending calls sorted as
        :meth:`LogState.columns` sorts them."""
        return [self.next_turn, self.next_step, sorted(self.pending, key=str), self.stats.columns()]


# Checkpoints repeat across sessions (every session's first turn ends the same way): each value is kept once.
_CHECKPOINTS: dict[Checkpoint, Checkpoint] = {}
_CHECKPOINTS_LIMIT = 1 << 16


def checkpoint(
    next_turn: Any, next_step: Any, pending: frozenset[Any] = NO_PENDING, stats: SessionStats = NO_STATS
) -> Checkpoint:
    """The shared :class:`Checkpoint` of these values (one with figures is rarely another's: it is kept alone, and
    shares its figures with the log state it was taken from)."""
    point = Checkpoint(next_turn, next_step, pending if pending else NO_PENDING, stats)
    if stats is not NO_STATS:
        return point
    try:
        return _CHECKPOINTS[point]
    except KeyError:
        if len(_CHECKPOINTS) < _CHECKPOINTS_LIMIT:
            _CHECKPOINTS[point] = point
        return point
    except TypeError:  # a value that does not hash (never one the rules let through, but keep it unshared)
        return point


@dataclass(slots=True)
class StagedEvents:
    """A validated batch not yet part of the log: commit it once its bytes are durable, or drop it.

    ``ends[i]`` is the offset just past event ``i``'s newline within ``lines``.
    """

    base_count: int
    state: LogState
    events: list[dict[str, Any]]
    lines: bytes
    ends: array[int]
    surface_ops: list[SurfaceChange] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)


def join_staged(first: StagedEvents, second: StagedEvents) -> StagedEvents:
    """One batch of ``first`` then ``second`` (staged ``after=first``): committed, and written, at once."""
    if second.base_count != first.base_count + len(first.events):
        raise ValueError("the second batch was not staged after the first")
    shift = len(first.lines)
    return StagedEvents(
        base_count=first.base_count,
        state=second.state,
        events=first.events + second.events,
        lines=first.lines + second.lines,
        ends=first.ends + array("q", (end + shift for end in second.ends)),
        surface_ops=first.surface_ops + second.surface_ops,
        turn_ends=first.turn_ends + second.turn_ends,
        checkpoints={**first.checkpoints, **second.checkpoints},
    )


def encode_event(event: dict[str, Any]) -> bytes:
    return dumps(event)


class LogTip(Protocol):
    """What staging needs of a log: the rules' state after its last event, and its events by seq."""

    @property
    def state(self) -> LogState: ...

    def event(self, seq: int) -> dict[str, Any]: ...


def replace_targets(*batches: Sequence[Any]) -> set[int]:
    """Seqs a ``tool/result`` replace may compare with: the ``start`` of every replace surfaceOp in the batches (the
    events a check of them looks up)."""
    wanted: set[int] = set()
    for events in batches:
        for event in events:
            op = event.get("surfaceOp") if isinstance(event, dict) else None
            if isinstance(op, dict) and isinstance(op.get("start"), int):
                wanted.add(op["start"])
    return wanted
