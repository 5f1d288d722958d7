"""One session's append-only event log, held as the bytes of its JSONL lines, in parts that forks share.

Each stored event is one line of canonical JSON. A log is a run of *parts*; a part holds the bytes of a run of whole
lines and what the log knows of them: where each line ends (offsets from the log's first byte), the surface changes
(flat ``seq, start, end`` triples), the ``turn/end`` seqs and a small checkpoint at each. Every part but the last is
*sealed*: it never changes again, so a fork refers to it instead of copying it, and cuts the one its seed ends in
short through views (memoryviews: no copy). The last part grows with every commit and is sealed once it holds
``SEAL_BYTES`` (a new one is started); a fork whose seed ends in it seals it first when it holds
``FORK_SEAL_BYTES`` or more (so that it and the forks after it share it), else copies what it takes of it. So a
fork's memory and CPU do not grow with its seed, and the source appends on without ever
changing what a child shares.

Events are therefore immutable once stored (nobody holds a mutable object of them) and reading a range is a slice.
The rules' running :class:`LogState`, the surface changes and the checkpoints let an append cost O(events appended)
and a fork at an earlier boundary rebuild its state without replaying the log.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from app.domain.errors import ErrorCode, EventRejected, SessionError
from app.domain.history import SurfaceChange, fold_surface, project_message
from app.domain.log_state import LogState
from app.domain.staging import Checkpoint, LogTip, StagedEvents
from app.domain.staging_rules import stage
from app.domain.stats import SessionStats
from app.domain.summary import TITLE_TYPE, title_of

__all__ = [
    "SEAL_BYTES",
    "SessionLog",
    "seed_log",
]

# The growing part of a log is sealed (made shareable) once it holds this many bytes, or SEAL_EVENTS events.
SEAL_BYTES = 1 << 20
SEAL_EVENTS = 1 << 14
# A fork whose seed ends in a growing part at least this large seals it (one copy, then shared) rather than copying it.
FORK_SEAL_BYTES = 1 << 16

# A buffer of bytes: bytes, a bytearray or a memoryview of either.
Buffer = bytes | bytearray | memoryview


class _Part:
    """Events ``first`` .. ``first + len(ends) - 1`` of a log, whose bytes start at offset ``base``."""

    __slots__ = ("base", "body", "checkpoints", "ends", "first", "surface", "turn_ends")

    def __init__(
        self,
        first: int,
        base: int,
        body: Buffer,
        ends: Sequence[int],
        surface: Sequence[int],
        turn_ends: Sequence[int],
        checkpoints: Sequence[Checkpoint],
    ) -> None:
        self.first = first
        self.base = base
        self.body = body
        self.ends = ends
        self.surface = surface
        self.turn_ends = turn_ends
        self.checkpoints = checkpoints

    @property
    def stop(self) -> int:
        """One past the seq of its last event."""
        return self.first + len(self.ends)

    def start_of(self, seq: int) -> int:
        at = seq - self.first
        return self.ends[at - 1] if at > 0 else self.base

    def piece(self, start: int, stop: int) -> Buffer:
        """Its bytes from log offset ``start`` to ``stop``: a view of a sealed part, a copy of a growing one."""
        return self.body[start - self.base : stop - self.base]

    def changes_upto(self, last: int) -> int:
        """How many of its surface changes are of events up to ``last``."""
        surface = self.surface
        low, high = 0, len(surface) // 3
        while low < high:
            middle = (low + high) // 2
            if surface[3 * middle] <= last:
                low = middle + 1
            else:
                high = middle
        return low


class _Growing(_Part):
    """The part a log appends to: its columns are its own (copied when a fork takes some of them)."""

    __slots__ = ()
    body: bytes | bytearray  # bytes until the first commit: a log made from bytes copies them only when it grows
    ends: array[int]
    surface: array[int]
    turn_ends: array[int]
    checkpoints: list[Checkpoint]

    def __init__(self, first: int, base: int, body: bytes | bytearray = b"") -> None:
        super().__init__(first, base, body, array("q"), array("q"), array("q"), [])

    def sealed(self) -> _Part:
        """This part as it is, sealed: it is never appended to again (its arrays are handed over, not copied)."""
        return _Part(
            self.first,
            self.base,
            memoryview(bytes(self.body)),
            self.ends,
            self.surface,
            self.turn_ends,
            tuple(self.checkpoints),
        )

    def copy_upto(self, count: int) -> _Growing:
        """A growing part of its own holding this one's events up to ``count`` (a fork's)."""
        taken = count - self.first
        copy = _Growing(self.first, self.base)
        if taken <= 0:
            return copy
        last = count - 1
        copy.body = bytes(self.body[: self.ends[taken - 1] - self.base])
        copy.ends = self.ends[:taken]
        copy.surface = self.surface[: 3 * self.changes_upto(last)]
        turns = bisect_right(self.turn_ends, last)
        copy.turn_ends = self.turn_ends[:turns]
        copy.checkpoints = self.checkpoints[:turns]
        return copy


def _base_of(part: _Part) -> int:
    return part.base


def _view(column: Sequence[int], stop: int) -> Sequence[int]:
    """The first ``stop`` items of a sealed part's column, without a copy."""
    if isinstance(column, array):
        return memoryview(column)[:stop]
    if isinstance(column, memoryview):
        return column[:stop]
    return column[:stop]


def _cut_short(part: _Part, count: int) -> _Part:
    """A sealed ``part`` up to event ``count`` (exclusive), sharing its bytes and columns through views."""
    taken = count - part.first
    last = count - 1
    end = part.ends[taken - 1]
    body = part.body if isinstance(part.body, memoryview) else memoryview(part.body)
    turns = bisect_right(part.turn_ends, last)
    return _Part(
        part.first,
        part.base,
        body[: end - part.base],
        _view(part.ends, taken),
        _view(part.surface, 3 * part.changes_upto(last)),
        _view(part.turn_ends, turns),
        tuple(part.checkpoints[:turns]),
    )


class SessionLog:
    __slots__ = ("_firsts", "_growing", "_sealed", "state")

    # When the growing part is sealed (a subclass may seal sooner, e.g. to test many parts on small logs).
    seal_bytes = SEAL_BYTES
    seal_events = SEAL_EVENTS

    def __init__(self) -> None:
        self._sealed: tuple[_Part, ...] = ()
        self._firsts: tuple[int, ...] = ()  # the first seq of each sealed part
        self._growing = _Growing(0, 0)
        self.state = LogState()

    # -- reading ---------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        growing = self._growing
        return growing.first + len(growing.ends)

    @property
    def byte_size(self) -> int:
        growing = self._growing
        return growing.base + len(growing.body)

    def _part_of(self, seq: int) -> _Part:
        growing = self._growing
        if seq >= growing.first:
            return growing
        return self._sealed[bisect_right(self._firsts, seq) - 1]

    def _parts(self) -> Iterator[_Part]:
        yield from self._sealed
        yield self._growing

    def offset(self, count: int) -> int:
        """The offset just past event ``count - 1`` (the bytes of the first ``count`` events)."""
        if count <= 0:
            return 0
        part = self._part_of(count - 1)
        return part.ends[count - 1 - part.first]

    def _pieces(self, start: int, stop: int) -> Iterator[Buffer]:
        """The bytes from offset ``start`` to ``stop``, a piece per part they touch (views of sealed parts)."""
        sealed = self._sealed
        parts: Sequence[_Part] = sealed
        if not sealed or start >= self._growing.base:
            parts = ()
        elif start > 0:
            parts = sealed[bisect_right(sealed, start, key=_base_of) - 1 :]
        for part in (*parts, self._growing):
            if part.base >= stop:
                return
            end = part.ends[-1] if len(part.ends) else part.base
            if end > start:
                yield part.piece(max(start, part.base), min(stop, end))

    def lines(self, start: int = 0, stop: int | None = None) -> bytes:
        """The JSONL lines of events ``start`` .. ``stop - 1`` (each ends in a newline)."""
        stop = len(self) if stop is None else min(stop, len(self))
        if start >= stop:
            return b""
        return b"".join(self._pieces(self.offset(start), self.offset(stop)))

    def body_pieces(self) -> tuple[memoryview, ...]:
        """All stored lines, a view per part, without a copy: only while nothing is committed to this log (a log
        that is not live yet), since a growing bytearray cannot resize while it is viewed."""
        return tuple(memoryview(part.body) for part in self._parts() if len(part.body))

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
        for part in self._parts():
            body = part.body
            for position in range(0, len(body), chunk_bytes):
                yield bytes(body[position : position + chunk_bytes])

    def event(self, seq: int) -> dict[str, Any]:
        part = self._part_of(seq)
        at = seq - part.first
        start = part.ends[at - 1] if at > 0 else part.base
        return orjson.loads(part.body[start - part.base : part.ends[at] - part.base])  # type: ignore[no-any-return]

    def events(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        return orjson.loads(self.json_array(start, stop))  # type: ignore[no-any-return]

    def is_turn_end(self, seq: int) -> bool:
        if seq < 0 or seq >= len(self):
            return False
        turn_ends = self._part_of(seq).turn_ends
        at = bisect_left(turn_ends, seq)
        return at < len(turn_ends) and turn_ends[at] == seq

    def _checkpoint_at(self, seq: int) -> Checkpoint:
        part = self._part_of(seq)
        return part.checkpoints[bisect_left(part.turn_ends, seq)]

    def _surface_changes(self, last: int) -> list[SurfaceChange]:
        """The surface changes of events up to ``last``, in order."""
        changes: list[SurfaceChange] = []
        for part in self._parts():
            if part.first > last:
                break
            surface = part.surface
            taken = 3 * part.changes_upto(last)
            changes.extend(zip(surface[0:taken:3], surface[1:taken:3], surface[2:taken:3], strict=True))
        return changes

    def history(self, at_seq: int | None = None) -> list[Any]:
        """The model history: the surface fold, at the end of the log or just after event ``at_seq``."""
        if at_seq is None or at_seq >= len(self) - 1:
            nodes: Sequence[int] = self.state.nodes
        else:
            nodes = fold_surface(self._surface_changes(at_seq))
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
        growing = self._growing
        offset = growing.base + len(growing.body)
        if type(growing.body) is bytes:
            growing.body = bytearray(growing.body)  # the first write to bytes the log was made from copies them
        growing.body += staged.lines
        growing.ends.extend([end + offset for end in staged.ends])
        for change in staged.surface_ops:
            growing.surface.extend(change)
        growing.turn_ends.extend(staged.turn_ends)
        growing.checkpoints.extend([staged.checkpoints[seq] for seq in staged.turn_ends])
        self.state = staged.state
        if len(growing.body) >= self.seal_bytes or len(growing.ends) >= self.seal_events:
            self._seal()

    def _seal(self) -> None:
        growing = self._growing
        self._sealed = (*self._sealed, growing.sealed())
        self._firsts = (*self._firsts, growing.first)
        self._growing = _Growing(growing.first + len(growing.ends), growing.base + len(growing.body))

    # -- branching -------------------------------------------------------------------------------------------------

    def prefix(self, count: int, then: StagedEvents | None = None) -> SessionLog:
        """A log of its own holding events ``0 .. count - 1``; ``count`` is 0 or one past a ``turn/end``.

        It shares the sealed parts (and views into the one it ends in) and copies only what it takes of the
        growing part: later commits to either log never show in the other. With ``then``, a batch staged on
        :meth:`tip_at` of ``count``, the prefix's own state is not rebuilt (``then`` holds the state after it) and the
        batch is committed after the prefix.
        """
        child = type(self)()
        if count > 0:
            if not self.is_turn_end(count - 1):
                raise ValueError("a log prefix must end at a turn/end")
            self._share_parts(child, count)
            if then is None:
                child.state = self.state_at(count)
        if then is not None:
            child.commit(then)
        return child

    def _share_parts(self, child: SessionLog, count: int) -> None:
        """Give the empty ``child`` the parts of events ``0 .. count - 1`` (``count`` > 0)."""
        last = count - 1
        growing = self._growing
        if count > growing.first and len(growing.body) >= FORK_SEAL_BYTES:
            # Sealed now, the part is shared with this child and every later fork instead of copied for each.
            self._seal()
            growing = self._growing
        if count > growing.first:
            child._sealed, child._firsts = self._sealed, self._firsts
            child._growing = growing.copy_upto(count)
        else:
            at = bisect_right(self._firsts, last) - 1
            part = self._sealed[at]
            whole = part if count == part.stop else _cut_short(part, count)
            child._sealed = (*self._sealed[:at], whole)
            child._firsts = self._firsts[: at + 1]
            child._growing = _Growing(count, part.ends[count - 1 - part.first])

    def state_at(self, count: int) -> LogState:
        """The rules' state after events ``0 .. count - 1`` (``count`` one past a ``turn/end``), rebuilt from the
        checkpoint there, without replaying the log."""
        last = count - 1
        point = self._checkpoint_at(last)
        # A committed state's nodes never change (staging copies them first), so the whole log's are shared.
        nodes = self.state.nodes if count == len(self) else fold_surface(self._surface_changes(last))
        state = self.state
        title, title_seq = state.title, state.title_seq
        if title_seq is not None and title_seq >= count:
            title, title_seq = self.last_title(count)
        preview, preview_seq = state.preview, state.preview_seq
        if preview_seq is not None and preview_seq >= count:
            preview, preview_seq = None, None
        return LogState(
            count=count,
            last_time=self.event(last)["time"],
            last_type="turn/end",
            last_turn_end_seq=last,
            open_turn=None,
            open_step=None,
            next_turn=point.next_turn,
            next_step=point.next_step,
            pending=point.pending,
            nodes=nodes,
            body_bytes=self.offset(count),
            title=title,
            title_seq=title_seq,
            preview=preview,
            preview_seq=preview_seq,
            stats=point.stats.owned_from(count),
        )

    def tip_at(self, count: int) -> LogTip:
        """What a batch staged after the first ``count`` events (0 or one past a ``turn/end``) is checked against;
        nothing is copied (events below ``count`` never change)."""
        if count == 0:
            return _PrefixTip(LogState(), self)
        if not self.is_turn_end(count - 1):
            raise ValueError("a log prefix must end at a turn/end")
        return _PrefixTip(self.state_at(count), self)

    def last_title(self, stop: int) -> tuple[str | None, int | None]:
        """The title of the last ``session/title`` event before ``stop``, and its seq (None, None if there is none).

        Only a fork before the source's last title asks: the stored bytes are searched for the type's name (a fast
        scan, no parse), and each line found is parsed to confirm it is such an event (the name may stand in text).
        """
        needle = b'"' + TITLE_TYPE.encode() + b'"'
        for part in reversed((*self._sealed, self._growing)):
            if part.first >= stop:
                continue
            end = part.start_of(stop) - part.base if stop < part.stop else len(part.body)
            data = bytes(part.body[:end])
            position = data.rfind(needle)
            while position >= 0:
                seq = part.first + bisect_right(part.ends, part.base + position)
                event = self.event(seq)
                if event.get("type") == TITLE_TYPE:
                    return title_of(event.get("data")), seq
                position = data.rfind(needle, 0, part.start_of(seq) - part.base)
        return None, None


class _PrefixTip:
    """A :class:`~app.domain.staging.LogTip` of a log's first ``state.count`` events, read from the log itself."""

    __slots__ = ("_log", "state")

    def __init__(self, state: LogState, log: SessionLog) -> None:
        self.state = state
        self._log = log

    def event(self, seq: int) -> dict[str, Any]:
        return self._log.event(seq)


def seed_log(
    seed: Sequence[Any] | None, *, now: int, breaks: dict[int, str] | None = None, seed_length: int | None = None
) -> SessionLog:
    """A new log holding ``seed``, every event checked; INVALID_SEED names the lowest bad index. ``seed_length`` is
    the header's (the first events that came from a parent: its own usage counts from there). Pure: safe to run in a
    worker thread."""
    log = SessionLog()
    log.state.stats = SessionStats(seed_length or 0)
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
