"""What a backend keeps of a log apart from its events' bytes, and how a log is resumed from it.

PostgreSQL keeps a log's :class:`LogParts` in its rows; the files backend's checkpoint journal keeps
:class:`LogDelta` records (what a log held past a point) and resumes a log from them at a start. The rules'
state, the line ends, the surface changes and the checkpoints are the :class:`~app.domain.log.SessionLog`'s own
columns: these functions read and rebuild them, so they work on its parts directly.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.log import Buffer, SessionLog, _Growing, _Part
from app.domain.log_state import LogState
from app.domain.staging import Checkpoint

__all__ = ["LogDelta", "LogParts", "log_parts", "log_since", "resume_log"]


@dataclass(frozen=True, slots=True)
class LogParts:
    """Events of a log apart from their bytes (what a backend's checkpoint keeps): the rules' state after the last
    of them, each line's end offset (from the log's first byte), the surface changes as flat ``seq, start, end``
    triples, the ``turn/end`` seqs and the checkpoint at each (in the same order)."""

    state: LogState
    ends: Sequence[int]
    surface: Sequence[int]
    turn_ends: Sequence[int]
    checkpoints: Sequence[Checkpoint]


@dataclass(frozen=True, slots=True)
class LogDelta:
    """What a log held past event ``start`` when :func:`log_since` took it: events ``start`` .. ``stop - 1``,
    the rules' state after them, their bytes from ``body_from`` to ``body_stop`` (``body``), and their columns as
    raw native 64-bit integers (``ends``, ``surface``, ``turn_ends``), each a tuple of pieces.

    Nothing in it changes while the log grows, so another thread may read it: the pieces of sealed parts are views
    (no copy), those of the growing part copies.
    """

    start: int
    stop: int
    body_start: int  # the offset of event ``start``'s first byte
    body_from: int
    body_stop: int
    body: tuple[Buffer, ...]
    state: LogState
    ends: tuple[memoryview, ...]
    surface: tuple[memoryview, ...]
    turn_ends: tuple[memoryview, ...]
    checkpoints: tuple[Checkpoint, ...]

    @property
    def parts(self) -> LogParts:
        """The same as one :class:`LogParts` (its columns copied into arrays)."""
        columns = []
        for pieces in (self.ends, self.surface, self.turn_ends):
            column: array[int] = array("q")
            for piece in pieces:
                column.frombytes(piece)
            columns.append(column)
        ends, surface, turn_ends = columns
        return LogParts(self.state, ends, surface, turn_ends, list(self.checkpoints))


def _raw(column: Sequence[int], start: int, *, sealed: bool) -> memoryview:
    """A column's items from ``start`` on as raw bytes: a view of a sealed part's (it never changes), a copy of the
    growing part's (a view would keep it from growing)."""
    if sealed and isinstance(column, array | memoryview):
        view = column if isinstance(column, memoryview) else memoryview(column)
        return view[start:].cast("B")
    copy = column[start:] if isinstance(column, array) else array("q", column[start:])
    return memoryview(copy).cast("B")


def log_since(log: SessionLog, start: int, body_from: int | None = None) -> LogDelta:
    """Events ``start`` .. the end, and the bytes from ``body_from`` (default: event ``start``'s first byte) to
    the end, in pieces another thread may read while this log grows: views of sealed parts, copies of the
    growing one (of what is asked of it only)."""
    stop = len(log)
    body_start = log.offset(start)
    body_from = body_start if body_from is None else body_from
    body_stop = log.byte_size
    ends: list[memoryview] = []
    surface: list[memoryview] = []
    turn_ends: list[memoryview] = []
    checkpoints: list[Checkpoint] = []
    for part in log._parts():
        if part.stop <= start:
            continue
        sealed = part is not log._growing
        first_turn = bisect_left(part.turn_ends, start)
        ends.append(_raw(part.ends, max(start - part.first, 0), sealed=sealed))
        surface.append(_raw(part.surface, 3 * part.changes_upto(start - 1), sealed=sealed))
        turn_ends.append(_raw(part.turn_ends, first_turn, sealed=sealed))
        checkpoints.extend(part.checkpoints[first_turn:])
    return LogDelta(
        start=start,
        stop=stop,
        body_start=body_start,
        body_from=body_from,
        body_stop=body_stop,
        body=tuple(log._pieces(body_from, body_stop)),
        state=log.state,
        ends=tuple(ends),
        surface=tuple(surface),
        turn_ends=tuple(turn_ends),
        checkpoints=tuple(checkpoints),
    )


def log_parts(log: SessionLog) -> LogParts:
    """Everything but the events' bytes that makes ``log`` (see :func:`resume_log`)."""
    return log_since(log, 0, log.byte_size).parts


def resume_log(body: Buffer, parts: LogParts, cls: type[SessionLog] = SessionLog) -> SessionLog:
    """The log whose lines are ``body`` and whose rules stood as ``parts`` says (every column whole, from the
    first event); ValueError if they do not fit. A large body is kept as it is (one sealed part, viewed, not
    copied); a small one is copied only once the log grows."""
    count = parts.state.count
    ends, surface, turn_ends = parts.ends, parts.surface, parts.turn_ends
    if (
        len(ends) != count
        or (count and ends[-1] != len(body))
        or (not count and len(body))
        or (count and body[-1] != 0x0A)
        or (isinstance(body, bytes) and body.count(b"\n") != count)
        or len(surface) % 3
        or len(turn_ends) != len(parts.checkpoints)
        or (len(turn_ends) and not (turn_ends[0] >= 0 and turn_ends[-1] < count))
        or (len(surface) and not (surface[0] >= 0 and surface[-3] < count))
        or any(not isinstance(point, Checkpoint) for point in parts.checkpoints)
    ):
        raise ValueError("the parts do not fit the body")
    log = cls()
    if len(body) >= cls.seal_bytes:
        view = body if isinstance(body, memoryview) else memoryview(body)
        log._sealed = (_Part(0, 0, view, ends, surface, turn_ends, tuple(parts.checkpoints)),)
        log._firsts = (0,)
        log._growing = _Growing(count, len(body))
    else:
        growing = log._growing
        growing.body = bytes(body)
        growing.ends = ends if isinstance(ends, array) else array("q", ends)
        growing.surface = surface if isinstance(surface, array) else array("q", surface)
        growing.turn_ends = turn_ends if isinstance(turn_ends, array) else array("q", turn_ends)
        growing.checkpoints = list(parts.checkpoints)
    log.state = parts.state
    return log
