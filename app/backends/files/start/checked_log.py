"""What a worker keeps of a log it checks whole: the rules' state and the columns of its checkpoint record.

A worker process that checks a file for a start (:mod:`app.backends.files.start.parallel_checks`) sends back only the
record of the whole log, never the log: a :class:`~app.domain.log.SessionLog` grown there (its lines copied into one
growing buffer, its line ends shifted one by one) would be thrown away. :class:`CheckedLog` is staged and committed
exactly like one (the same :func:`~app.domain.staging_rules.stage` and
:func:`~app.domain.staging_rules.stage_stored` decide what the rules let through, and read back earlier events the
same way), but it keeps each committed window's lines as they came and its columns as flat arrays, and hands them
over as the :class:`~app.backends.log_parts.LogDelta` of the whole log that
:func:`~app.backends.files.checkpoints.records.encode_record` encodes.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from functools import partial
from operator import add
from typing import Any

import orjson

from app.backends.log_parts import LogDelta
from app.domain.log_state import LogState
from app.domain.staging import Checkpoint, StagedEvents
from app.domain.staging_rules import stage

__all__ = ["CheckedLog"]


class CheckedLog:
    """A log being checked from its first event (see the module's docstring)."""

    __slots__ = ("_bases", "_checkpoints", "_ends", "_surface", "_turn_ends", "_windows", "state")

    def __init__(self) -> None:
        self.state = LogState()
        self._windows: list[bytes] = []  # the lines of each commit, as they came
        self._bases: list[int] = []  # the offset of each window's first byte
        self._ends = array("q")  # the offset just past each event's newline
        self._surface = array("q")
        self._turn_ends = array("q")
        self._checkpoints: list[Checkpoint] = []

    def __len__(self) -> int:
        return len(self._ends)

    @property
    def byte_size(self) -> int:
        return self._ends[-1] if self._ends else 0

    def event(self, seq: int) -> dict[str, Any]:
        """Event ``seq`` read back from its line (as :meth:`SessionLog.event` reads it)."""
        start = self._ends[seq - 1] if seq > 0 else 0
        window = bisect_right(self._bases, start) - 1
        base = self._bases[window]
        return orjson.loads(self._windows[window][start - base : self._ends[seq] - base])  # type: ignore[no-any-return]

    def stage(self, raws: Sequence[Any], *, appended: bool, now: int) -> StagedEvents:
        return stage(self, raws, appended=appended, now=now)

    def commit(self, staged: StagedEvents) -> None:
        if staged.base_count != len(self):
            raise RuntimeError("a staged batch was committed onto a log that changed since it was staged")
        offset = self.byte_size
        self._bases.append(offset)
        self._windows.append(staged.lines)
        self._ends.extend(map(partial(add, offset), staged.ends) if offset else staged.ends)
        for change in staged.surface_ops:
            self._surface.extend(change)
        self._turn_ends.extend(staged.turn_ends)
        self._checkpoints.extend([staged.checkpoints[seq] for seq in staged.turn_ends])
        self.state = staged.state

    def lines(self) -> bytes:
        """Every committed line."""
        return b"".join(self._windows)

    def delta(self) -> LogDelta:
        """The whole log as the delta its checkpoint record is encoded from."""
        return LogDelta(
            start=0,
            stop=len(self),
            body_start=0,
            body_from=0,
            body_stop=self.byte_size,
            body=tuple(self._windows),
            state=self.state,
            ends=(memoryview(self._ends).cast("B"),),
            surface=(memoryview(self._surface).cast("B"),),
            turn_ends=(memoryview(self._turn_ends).cast("B"),),
            checkpoints=tuple(self._checkpoints),
        )
