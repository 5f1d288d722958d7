"""One session's append-only event log, held as the bytes of its JSONL lines.

Each stored event is one line of canonical JSON in a single ``bytearray``; ``ends[i]`` is the offset just past
event ``i``'s newline. Events are therefore immutable once stored (nobody holds a mutable object of them), reading
a range is a slice, and a fork copies one contiguous run of bytes plus an array of offsets: its cost is a memcpy of
the prefix, not a per-event copy of Python objects. The rules' running :class:`LogState`, the surface operations
and a small checkpoint at every ``turn/end`` let an append cost O(events appended) and a fork at an earlier
boundary rebuild its state without replaying the log.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from app.domain.errors import ErrorCode, EventRejected, SessionError
from app.domain.events import LogState, admit
from app.domain.history import SurfaceChange, fold_surface, project_message
from app.domain.jsonvalue import dumps

__all__ = [
    "Checkpoint",
    "LogParts",
    "LogTip",
    "SessionLog",
    "StagedEvents",
    "chain",
    "encode_event",
    "seed_log",
    "stage",
]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The invariant trace right after a ``turn/end`` (the rest of it is known: no turn or step is open)."""

    next_turn: Any
    next_step: Any
    pending: frozenset[Any]


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


def chain(first: StagedEvents, second: StagedEvents) -> StagedEvents:
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


class SessionLog:
    __slots__ = ("_body", "_checkpoints", "_ends", "_surface_ops", "_turn_ends", "state")

    def __init__(self) -> None:
        self._body = bytearray()
        self._ends: array[int] = array("q")
        self._surface_ops: list[SurfaceChange] = []
        self._turn_ends: array[int] = array("q")
        self._checkpoints: dict[int, Checkpoint] = {}
        self.state = LogState()

    # -- reading ---------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ends)

    @property
    def byte_size(self) -> int:
        return len(self._body)

    def _start(self, index: int) -> int:
        return self._ends[index - 1] if index > 0 else 0

    def lines(self, start: int = 0, stop: int | None = None) -> bytes:
        """The JSONL lines of events ``start`` .. ``stop - 1`` (each ends in a newline)."""
        stop = len(self) if stop is None else min(stop, len(self))
        if start >= stop:
            return b""
        return bytes(self._body[self._start(start) : self._ends[stop - 1]])

    def body_view(self) -> memoryview:
        """All stored lines without a copy. Release it before the log grows (a bytearray cannot resize while viewed)."""
        return memoryview(self._body)

    def json_array(self, start: int = 0, stop: int | None = None) -> bytes:
        """Events ``start`` .. ``stop - 1`` as one JSON array, straight from the stored bytes."""
        body = self.lines(start, stop)
        if not body:
            return b"[]"
        # A stored line never holds a raw newline (JSON escapes them in strings), so newlines separate events.
        return b"[" + body[:-1].replace(b"\n", b",") + b"]"

    def line_chunks(self, chunk_bytes: int = 4 * 1024 * 1024) -> Iterator[bytes]:
        """The stored lines in pieces of about ``chunk_bytes`` (cut anywhere), so a large log is never copied whole.

        Only for a log nobody appends to while it is read (a prefix taken for a snapshot's seed).
        """
        body = memoryview(self._body)
        try:
            for position in range(0, len(body), chunk_bytes):
                yield bytes(body[position : position + chunk_bytes])
        finally:
            body.release()

    def event(self, seq: int) -> dict[str, Any]:
        return orjson.loads(self._body[self._start(seq) : self._ends[seq]])  # type: ignore[no-any-return]

    def events(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        return orjson.loads(self.json_array(start, stop))  # type: ignore[no-any-return]

    def is_turn_end(self, seq: int) -> bool:
        at = bisect_right(self._turn_ends, seq) - 1
        return at >= 0 and self._turn_ends[at] == seq

    def history(self, at_seq: int | None = None) -> list[Any]:
        """The model history: the surface fold, at the end of the log or just after event ``at_seq``."""
        if at_seq is None or at_seq >= len(self) - 1:
            nodes: Sequence[int] = self.state.nodes
        else:
            nodes = fold_surface(self._surface_ops[: bisect_right(self._surface_ops, (at_seq, 2**62, 0))])
        messages = []
        for seq in nodes:
            message = project_message(self.event(seq))
            if message is not None:
                messages.append(message)
        return messages

    # -- writing ---------------------------------------------------------------------------------------------------

    def stage(
        self,
        raws: Sequence[Any],
        *,
        appended: bool,
        now: int,
        breaks: dict[int, str] | None = None,
        after: StagedEvents | None = None,
    ) -> StagedEvents:
        """:func:`stage` after this log's last event."""
        return stage(self, raws, appended=appended, now=now, breaks=breaks, after=after)

    def commit(self, staged: StagedEvents) -> None:
        if staged.base_count != len(self):
            raise RuntimeError("a staged batch was committed onto a log that changed since it was staged")
        offset = len(self._body)
        self._body += staged.lines
        self._ends.extend(end + offset for end in staged.ends)
        self._surface_ops.extend(staged.surface_ops)
        self._turn_ends.extend(staged.turn_ends)
        self._checkpoints.update(staged.checkpoints)
        self.state = staged.state

    # -- branching -------------------------------------------------------------------------------------------------

    def prefix(self, count: int) -> SessionLog:
        """A new, independent log holding events ``0 .. count - 1``; ``count`` is 0 or one past a ``turn/end``."""
        child = SessionLog()
        if count == 0:
            return child
        last = count - 1
        if not self.is_turn_end(last):
            raise ValueError("a log prefix must end at a turn/end")
        child._body = self._body[: self._ends[last]]
        child._ends = self._ends[:count]
        op_count = bisect_right(self._surface_ops, (last, 2**62, 0))
        child._surface_ops = self._surface_ops[:op_count]
        child._turn_ends = self._turn_ends[: bisect_right(self._turn_ends, last)]
        child._checkpoints = {seq: self._checkpoints[seq] for seq in child._turn_ends}
        checkpoint = self._checkpoints[last]
        nodes = self.state.nodes if count == len(self) else fold_surface(child._surface_ops)
        child.state = LogState(
            count=count,
            last_time=self.event(last)["time"],
            last_type="turn/end",
            last_turn_end_seq=last,
            open_turn=None,
            open_step=None,
            next_turn=checkpoint.next_turn,
            next_step=checkpoint.next_step,
            pending=set(checkpoint.pending),
            nodes=list(nodes),
        )
        return child

    # -- the parts a checked log is made of (a backend's index stores them) ----------------------------------------

    def parts(self) -> LogParts:
        """Everything but the events' bytes that makes this log (for an index: see :meth:`from_parts`)."""
        return LogParts(
            state=self.state,
            ends=self._ends,
            surface_changes=self._surface_ops,
            checkpoints=self._checkpoints,
        )

    @classmethod
    def from_parts(cls, body: bytearray, parts: LogParts) -> SessionLog:
        """The log whose events are ``body`` and whose rules stood as ``parts`` says; ValueError if they do not fit."""
        count = parts.state.count
        if len(parts.ends) != count or (count and parts.ends[-1] != len(body)) or (not count and body):
            raise ValueError("the parts do not fit the body")
        log = cls()
        log._body = body
        log._ends = parts.ends
        log._surface_ops = list(parts.surface_changes)
        log._checkpoints = dict(parts.checkpoints)
        log._turn_ends = array("q", sorted(log._checkpoints))
        log.state = parts.state
        return log


@dataclass(frozen=True, slots=True)
class LogParts:
    """A log apart from its bytes: the rules' state at its end, line ends, surface changes, turn/end checkpoints."""

    state: LogState
    ends: array[int]
    surface_changes: Sequence[SurfaceChange]
    checkpoints: dict[int, Checkpoint]


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
    afterwards. ``after``, a batch staged but not committed yet, puts these events after it (see :func:`chain`).
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
        seq = event["seq"]
        kind = event["type"]
        if "surfaceOp" in event:
            op = event["surfaceOp"]
            if isinstance(op, dict):
                staged.surface_ops.append((seq, int(op["start"]), int(op["end"])))
            else:
                staged.surface_ops.append((seq, -1, -1))
        if kind == "turn/end":
            staged.turn_ends.append(seq)
            staged.checkpoints[seq] = Checkpoint(state.next_turn, state.next_step, frozenset(state.pending))
    staged.lines = b"".join(chunks)
    return staged


def seed_log(seed: Sequence[Any] | None, *, now: int, breaks: dict[int, str] | None = None) -> SessionLog:
    """A new log holding ``seed``, every event checked; INVALID_SEED names the lowest bad index. Pure: safe to run
    in a worker thread."""
    log = SessionLog()
    if seed:
        try:
            log.commit(log.stage(seed, appended=False, now=now, breaks=breaks))
        except EventRejected as rejected:
            raise SessionError(
                ErrorCode.INVALID_SEED,
                f"seed event at index {rejected.index} is invalid: {rejected.reason}",
                index=rejected.index,
                reason=rejected.reason,
            ) from None
    return log
