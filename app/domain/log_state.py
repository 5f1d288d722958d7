"""What the rules of :mod:`app.domain.events` know of a log so far, and what a store keeps of it."""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.domain.closers import NO_UNANSWERED, Unanswered, unanswered_columns, unanswered_of_columns
from app.domain.event_shapes import known_type
from app.domain.stats import NO_STATS, SessionStats, stats_of_columns

if TYPE_CHECKING:
    from app.domain.session import LogHead

__all__ = ["NO_PENDING", "LogState"]

_new_state = object.__new__

# The pending tool calls of a log with none (most logs, at every turn/end): one object shared by all of them.
NO_PENDING: frozenset[Any] = frozenset()


@dataclass(slots=True)
class LogState:
    """What the rules need to know about a log so far; it grows by O(1) per event.

    ``open_turn`` .. ``pending`` mirror DSH's invariant trace (JavaScript values: ``None`` is ``null``). ``nodes``
    is the current model-visible surface (seqs in order). A committed state is never changed again: staging a batch
    works on a copy (:meth:`staged`) that shares ``nodes`` and ``pending`` until the batch first changes them, so an
    append without surface events or tool calls copies nothing big, and logs without pending calls share one empty
    set.
    """

    count: int = 0
    last_time: int | None = None
    last_type: str | None = None
    last_turn_end_seq: int | None = None
    open_turn: Any = None
    open_step: Any = None
    next_turn: Any = 1
    next_step: Any = 1
    pending: Set[Any] = NO_PENDING
    nodes: list[int] = field(default_factory=list)
    nodes_shared: bool = False
    # What the Session resource says of the log (spec 12), kept as it grows: the bytes of its stored lines, the
    # title of its last session/title event (and that event's seq), the preview of its first user/message (and its
    # seq). The seqs let a fork's seed tell whether the value is also its own.
    body_bytes: int = 0
    title: str | None = None
    title_seq: int | None = None
    preview: str | None = None
    preview_seq: int | None = None
    # The session's figures (spec 17: DSH's sessionStats fold and the usage chunks' token sums) and the tool calls
    # DSH's interruptedTurnClosers would answer, kept as the log grows (app.domain.stats, app.domain.closers): both
    # values that are never changed, only replaced.
    stats: SessionStats = NO_STATS
    unanswered: Unanswered = NO_UNANSWERED
    # Set by freeze(), the end of a staging: from then on the state never changes, so what is read from it once (its
    # LogHead, app.domain.session.head_of) may be kept with it. The append that staged it and the next one, which finds
    # it committed, both read its head.
    final: bool = field(default=False, init=False, repr=False, compare=False)
    head_kept: LogHead | None = field(default=None, init=False, repr=False, compare=False)

    def columns(self) -> list[Any]:
        """What a store keeps of this state, in a fixed order: all but ``count`` and ``nodes``, which it keeps its
        own way. The pending calls are sorted (by their text), so that equal states are stored as equal bytes."""
        return [
            self.last_time,
            self.last_type,
            self.last_turn_end_seq,
            self.open_turn,
            self.open_step,
            self.next_turn,
            self.next_step,
            sorted(self.pending, key=str),
            self.body_bytes,
            self.title,
            self.title_seq,
            self.preview,
            self.preview_seq,
            self.stats.columns(),
            unanswered_columns(self.unanswered),
        ]

    @classmethod
    def of_columns(cls, columns: Sequence[Any], *, count: int, nodes: list[int] | None = None) -> LogState:
        """The state whose :meth:`columns` these are, after ``count`` events (with ``nodes``, if known)."""
        (
            last_time,
            last_type,
            last_turn_end_seq,
            open_turn,
            open_step,
            next_turn,
            next_step,
            pending,
            body_bytes,
            title,
            title_seq,
            preview,
            preview_seq,
            stats,
            unanswered,
        ) = columns  # a ValueError for columns stored by an older forklog: such a record is not used
        if not (isinstance(body_bytes, int) and body_bytes >= 0):
            raise ValueError("the stored byte count is not a count")
        if not isinstance(stats, list) or not isinstance(unanswered, list):
            raise ValueError("the stored stats are not columns")
        return cls(
            count=count,
            last_time=last_time,
            last_type=known_type(last_type) if isinstance(last_type, str) else last_type,
            last_turn_end_seq=last_turn_end_seq,
            open_turn=open_turn,
            open_step=open_step,
            next_turn=next_turn,
            next_step=next_step,
            pending=frozenset(pending) if pending else NO_PENDING,
            nodes=nodes if nodes is not None else [],
            body_bytes=body_bytes,
            title=title,
            title_seq=title_seq,
            preview=preview,
            preview_seq=preview_seq,
            stats=stats_of_columns(stats),
            unanswered=unanswered_of_columns(unanswered),
        )

    def staged(self) -> LogState:
        """A copy to stage the next batch on (not final; ``nodes`` shared until changed). Set field by field rather
        than through ``__init__``, whose keyword call costs twice as much on every append; every field must be set
        here (tests/domain/test_log_state.py checks each)."""
        pending = self.pending
        copy: LogState = _new_state(LogState)
        copy.count = self.count
        copy.last_time = self.last_time
        copy.last_type = self.last_type
        copy.last_turn_end_seq = self.last_turn_end_seq
        copy.open_turn = self.open_turn
        copy.open_step = self.open_step
        copy.next_turn = self.next_turn
        copy.next_step = self.next_step
        copy.pending = pending if type(pending) is frozenset else frozenset(pending)
        copy.nodes = self.nodes
        copy.nodes_shared = True
        copy.body_bytes = self.body_bytes
        copy.title = self.title
        copy.title_seq = self.title_seq
        copy.preview = self.preview
        copy.preview_seq = self.preview_seq
        copy.stats = self.stats
        copy.unanswered = self.unanswered
        copy.final = False
        copy.head_kept = None
        return copy

    def own_nodes(self) -> list[int]:
        if self.nodes_shared:
            self.nodes = list(self.nodes)
            self.nodes_shared = False
        return self.nodes

    def own_pending(self) -> set[Any]:
        """``pending`` as a set this (staged) state may change."""
        pending = self.pending
        if not isinstance(pending, set):
            pending = self.pending = set(pending)
        return pending

    def freeze(self) -> None:
        """Make ``pending`` immutable again once a batch is checked (an empty one is the shared NO_PENDING); the state
        is final."""
        self.final = True
        if type(self.pending) is not frozenset or (not self.pending and self.pending is not NO_PENDING):
            self.pending = frozenset(self.pending) if self.pending else NO_PENDING
