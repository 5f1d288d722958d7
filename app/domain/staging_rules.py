"""The rules that stage a batch: validate it as the next events of a log (:func:`stage`), or of stored events whose
bytes are known (:func:`stage_stored`), without changing the log: it stays readable as it was while the batch is made
durable, and the batch is committed afterwards (:meth:`~app.domain.log.SessionLog.commit`).

The service stages every change; a backend stores the batches it is given and imports none of this (an
import-linter contract says so), but for the file backend's recovery, which checks what its files hold as they are
read.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import accumulate, repeat
from operator import add
from typing import Any

from app.domain.closers import fold_unanswered
from app.domain.errors import EventRejected
from app.domain.event_shapes import STORAGE_TAGS
from app.domain.events import admit, admit_stored, admit_stored_chunks
from app.domain.log_state import LogState
from app.domain.staging import LogTip, StagedEvents, checkpoint, encode_event
from app.domain.stats import fold_stats
from app.domain.summary import TITLE_TYPE, preview_of, title_of

__all__ = ["stage", "stage_stored"]


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
    if kind in _FOLDED:
        _fold(state, event)
    if kind == "turn/end":
        staged.turn_ends.append(seq)
        staged.checkpoints[seq] = checkpoint(state.next_turn, state.next_step, frozenset(state.pending), state.stats)
    elif kind == TITLE_TYPE:
        state.title, state.title_seq = title_of(event["data"]), seq
    elif kind == "user/message" and state.preview_seq is None:
        state.preview, state.preview_seq = preview_of(event["data"]), seq


# The types that change a session's figures or the calls an interrupt answers (app.domain.stats, app.domain.closers).
_FOLDED = frozenset(
    {
        "assistant/chunk",
        "step/start",
        "step/end",
        "assistant/message",
        "tool/call",
        "tool/result",
        "turn/start",
        "turn/end",
    }
)


def _fold(state: LogState, event: dict[str, Any]) -> None:
    state.stats = fold_stats(state.stats, event)
    if event["type"] != "assistant/chunk":  # (a chunk never changes the calls an interrupt answers)
        state.unanswered = fold_unanswered(state.unanswered, event)


def _fold_chunks(state: LogState, events: Sequence[Any], start: int, stop: int) -> None:
    """The figures after a run of streamed chunks (none changes the calls an interrupt answers)."""
    stats = state.stats
    for index in range(start, stop):
        stats = fold_stats(stats, events[index])
    state.stats = stats


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
        run = index
        index = admit_stored_chunks(state, values, index)
        if index > run:
            _fold_chunks(state, values, run, index)
        if index == count:
            break
        raw = values[index]
        if admit_stored(state, raw):
            _fold(state, raw)
            if state.last_type == "turn/end":
                staged.turn_ends.append(raw["seq"])
                staged.checkpoints[raw["seq"]] = checkpoint(
                    state.next_turn, state.next_step, frozenset(state.pending), state.stats
                )
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
