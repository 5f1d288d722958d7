"""This replica's cache of sessions' rule state, so that an append costs O(events appended), not O(log).

An entry is what the last read or change of a session in this process left: its header, the log it appends to and
the :class:`~app.domain.events.LogState` after its last event, surface nodes included. A tip answered from an entry
says it may be stale (another replica may have appended since): the append's statement is conditional on the head,
so a stale tip is refused there (``StaleHead``), and the service asks again with ``refresh``, which reads the row and
catches up from the events after the cached seq (their surface rows only). An entry is never trusted for a read.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from app.domain.log_state import LogState
from app.domain.session import Session, SessionKey

__all__ = ["CachedTip", "StoredTip", "TipCache"]


@dataclass(frozen=True, slots=True)
class CachedTip:
    session: Session
    log: int
    state: LogState


class StoredTip:
    """A :class:`~app.domain.staging.LogTip` over a stored log: the state, and the events the check may look up."""

    __slots__ = ("_events", "state")

    def __init__(self, state: LogState, events: dict[int, dict[str, Any]]) -> None:
        self.state = state
        self._events = events

    def event(self, seq: int) -> dict[str, Any]:
        try:
            return self._events[seq]
        except KeyError:
            raise LookupError(f"event {seq} was not fetched with the tip (not named in wanted)") from None


def _weight(entry: CachedTip) -> int:
    return 1 + len(entry.state.nodes)


class TipCache:
    """The most recently used entries: at most ``size`` of them, holding at most ``max_nodes`` surface nodes in all
    (a long session's nodes are most of what an entry weighs)."""

    def __init__(self, size: int = 1024, *, max_nodes: int = 2_000_000) -> None:
        self._size = size
        self._max_nodes = max_nodes
        self._weight = 0
        self._entries: OrderedDict[SessionKey, CachedTip] = OrderedDict()

    def get(self, key: SessionKey) -> CachedTip | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, key: SessionKey, entry: CachedTip) -> None:
        """Keep ``entry`` unless the one kept already is of the same log and further along."""
        kept = self._entries.get(key)
        if kept is not None and kept.log == entry.log and kept.state.count > entry.state.count:
            return
        self.drop(key)
        self._entries[key] = entry
        self._weight += _weight(entry)
        while len(self._entries) > 1 and (len(self._entries) > self._size or self._weight > self._max_nodes):
            _, evicted = self._entries.popitem(last=False)
            self._weight -= _weight(evicted)

    def drop(self, key: SessionKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._weight -= _weight(entry)

    def clear(self) -> None:
        self._entries.clear()
        self._weight = 0
