"""Staging: a batch of events checked by the rules, and what the log keeps beside their bytes, before it is committed.

A batch is validated as the next events of a log (:func:`stage`), or of stored events whose bytes are known
(:func:`stage_stored`), without changing the log: it stays readable as it was while the batch is made durable, and
the batch is committed afterwards (:meth:`~app.domain.log.SessionLog.commit`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import add
from typing import Any, Protocol

from app.domain.errors import EventRejected
from app.domain.event_shapes import STORAGE_TAGS
from app.domain.events import admit, admit_stored, admit_stored_chunks
from app.domain.history import SurfaceChange
from app.domain.jsonvalue import dumps
from app.domain.log_state import NO_PENDING, LogState
from app.domain.summary import TITLE_TYPE, preview_of, title_of

__all__ = [
    "Checkpoint",
    "LogTip",
    "StagedEvents",
    "checkpoint",
    "encode_event",
    "join_staged",
    "replace_targets",
    "stage",
    "stage_stored",
]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The invariant trace right after a ``turn/end`` (the rest of it is known: no turn or step is open)."""

    next_turn: Any
    next_step: Any
    pending: frozenset[Any]

    def columns(self) -> list[Any]:
        """What a store keeps of it (read back by :func:`checkpoint`), the pending calls sorted as
        :meth:`LogState.columns` sorts them."""
        return [self.next_turn, self.next_step, sorted(self.pending, key=str)]


# Checkpoints repeat across sessions (every session's first turn ends the same way): each value is kept once.
_CHECKPOINTS: dict[Checkpoint, Checkpoint] = {}
_CHECKPOINTS_LIMIT = 1 << 16


def checkpoint(next_turn: Any, next_step: Any, pending: frozenset[Any] = NO_PENDING) -> Checkpoint:
    """The shared :class:`Checkpoint` of these values."""
    point = Checkpoint(next_turn, next_step, pending if pending else NO_PENDING)
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


def stage(
    tip: LogTip,
    raws: Sequence[Any],
    *,
    appended: bool,
    now: int,
    breaks: dict[int, str] | None = None,
    after: StagedEvents | None = None,
) -> StagedEvents:
    """Validate ``raws`` as the next events of the log behind ``tip``, as one sequence; raise
    :class:`EventRejected` at the first bad one.

    Nothing changes: the log stays readable, as it was, while the batch is made durable, and it is committed
    afterwards. ``after``, a batch staged but not committed yet, puts these events after it (see :func:`join_staged`).
    """
    committed = tip.state.count
    state = (after.state if after is not None else tip.state).staged()
    base = after.base_count + len(after.events) if after is not None else committed
    staged = StagedEvents(base_count=base, state=state, events=[], lines=b"", ends=array("q"))

    def event_at(seq: int) -> dict[str, Any]:
        if seq < committed:
            return tip.event(seq)
        if seq < base:
            assert after is not None
            return after.events[seq - after.base_count]
        return staged.events[seq - base]

    chunks: list[bytes] = []
    offset = 0
    for index, raw in enumerate(raws):
        event = admit(
            state,
            raw,
            index,
            appended=appended,
            now=now,
            event_at=event_at,
            lossless_break=breaks.get(index) if breaks else None,
        )
        try:
            line = encode_event(event) + b"\n"
        except TypeError as exc:  # e.g. a string orjson cannot encode; never stored
            raise EventRejected(index, f"the event cannot be stored losslessly: {exc}") from None
        chunks.append(line)
        offset += len(line)
        staged.ends.append(offset)
        staged.events.append(event)
        _note(staged, event)
    state.body_bytes += offset
    staged.lines = b"".join(chunks)
    state.freeze()
    return staged


def _note(staged: StagedEvents, event: dict[str, Any]) -> None:
    """Keep what the log knows of an admitted ``event`` beside its bytes: its surface change, its turn's end, the
    session's title and preview (spec 12)."""
    seq = event["seq"]
    if "surfaceOp" in event:
        op = event["surfaceOp"]
        if isinstance(op, dict):
            staged.surface_ops.append((seq, int(op["start"]), int(op["end"])))
        else:
            staged.surface_ops.append((seq, -1, -1))
    kind = event["type"]
    state = staged.state
    if kind == "turn/end":
        staged.turn_ends.append(seq)
        staged.checkpoints[seq] = checkpoint(state.next_turn, state.next_step, frozenset(state.pending))
    elif kind == TITLE_TYPE:
        state.title, state.title_seq = title_of(event["data"]), seq
    elif kind == "user/message" and state.preview_seq is None:
        state.preview, state.preview_seq = preview_of(event["data"]), seq


def stage_stored(
    tip: LogTip, window: bytes, lines: Sequence[bytes], values: list[Any], *, now: int
) -> StagedEvents | None:
    """:func:`stage` of stored events (``appended=False``) whose bytes are known: ``window`` is their lines, each
    ending in a newline, ``lines`` the same without the newlines, and ``values[i]`` was parsed from ``lines[i]``,
    whose bytes are its canonical encoding. The staged bytes are ``window`` itself (nothing is encoded again) and the
    common shapes are admitted at once (:func:`~app.domain.events.admit_stored_chunks`, a run of chunks at a time,
    and :func:`~app.domain.events.admit_stored`).

    None when that is not all there is to it: a value that is no stored event (no ``seq`` and ``time``, the wrong
    seq, a packed row), an event the rules refuse, or one that would be stored in another form than it came.
    Nothing has changed then, and :func:`stage` decides (and says why it refuses).
    """
    committed = tip.state.count
    state = tip.state.staged()
    staged = StagedEvents(base_count=committed, state=state, events=values, lines=window, ends=array("q"))

    def event_at(seq: int) -> dict[str, Any]:
        return tip.event(seq) if seq < committed else values[seq - committed]

    index, count = 0, len(values)
    while index < count:
        index = admit_stored_chunks(state, values, index)
        if index == count:
            break
        raw = values[index]
        if admit_stored(state, raw):
            if state.last_type == "turn/end":
                staged.turn_ends.append(raw["seq"])
                staged.checkpoints[raw["seq"]] = checkpoint(state.next_turn, state.next_step, frozenset(state.pending))
            index += 1
            continue
        if type(raw) is not dict or raw.get("seq") != state.count or "time" not in raw:
            return None
        kind = raw.get("type")
        if type(kind) is str and kind in STORAGE_TAGS:
            return None
        try:
            event = admit(state, raw, index, appended=False, now=now, event_at=event_at)
        except EventRejected:
            return None
        if event is not raw:
            return None
        _note(staged, event)
        index += 1
    # Each line's end: the running sum of the lines' lengths, each with its newline (summed in C, no Python call).
    staged.ends = array("q", accumulate(map(add, map(len, lines), repeat(1))))
    state.body_bytes += len(window)
    state.freeze()
    return staged


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
