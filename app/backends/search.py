"""The search engine seam (spec 12): what :class:`app.service.search.Searcher` asks of an index of words.

An engine keeps, per session, a superset of the words of its searchable text (as :func:`app.domain.search.words`
cuts them) and which incarnation and how many events that covers. It only narrows a search down: the service
confirms every candidate with the exact rule on the session as it is, and searches directly every session the
engine does not cover yet. So an engine may answer too many sessions, never too few of those it covers.

Engines: SQLite's FTS5 (:mod:`app.backends.search_index`) beside the files or in memory, and PostgreSQL's own
full-text search (:mod:`app.backends.postgres.search`), which every replica shares. A backend names its engine
(:class:`ProvidesSearchEngine`); one that does not gets an FTS5 index in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from app.domain.session import Session, SessionKey

__all__ = ["IndexDamaged", "IndexRow", "IndexedSession", "ProvidesSearchEngine", "SearchEngine", "SessionWalk"]

IndexedSession = tuple[str, int]  # the incarnation and how many of its events a row covers

# Every live session of every tenant, in any order (how an engine that cannot tell by itself finds what it lacks).
SessionWalk = Callable[[], AsyncIterator[Session]]


class IndexDamaged(Exception):
    """The index cannot be read or written: it is rebuilt, and searches meanwhile read the sessions themselves."""


@dataclass(frozen=True, slots=True)
class IndexRow:
    """What to write for one session: the words of its events from ``was``'s count on (all of them when ``anew``),
    and what the row covers afterwards. ``was`` is what the row covered when the words were read (None: no row):
    an engine several processes write applies the row only if it still covers that."""

    key: SessionKey
    covers: IndexedSession
    words: frozenset[str]
    anew: bool
    was: IndexedSession | None


class SearchEngine(Protocol):
    """An index of each session's words. Its calls may raise IndexDamaged (the caller rebuilds) or the storage
    errors of :mod:`app.backends.errors` (the caller tries again later)."""

    # Seconds between two indexing rounds: the longer, the more appends of one session a round takes at once.
    round_seconds: float

    async def open(self) -> None:
        """Open (or make) the index, replacing a damaged one."""

    async def reset(self) -> None:
        """Drop what the index holds, if it is this process's alone to drop (a shared one stays)."""

    async def close(self) -> None: ...

    async def stale(self, every: SessionWalk) -> set[SessionKey]:
        """The sessions the index does not hold as they are now, and those it holds that are gone."""

    async def covered(self, keys: Collection[SessionKey]) -> dict[SessionKey, IndexedSession]:
        """What the index's rows of ``keys`` cover (a key without a row is left out)."""

    async def words_of(self, key: SessionKey) -> tuple[IndexedSession, frozenset[str]] | None:
        """What ``key``'s row covers and its words, read together; None without a row, or for a row that keeps no
        words (one that is a candidate of every search)."""

    async def write(self, rows: Sequence[IndexRow], dropped: Collection[SessionKey]) -> set[SessionKey]:
        """Write ``rows`` and drop the rows of the gone sessions ``dropped``; the keys whose row another process
        changed meanwhile (not written: to be read again)."""

    async def candidates(self, tenant: str, words: tuple[str, ...]) -> set[str]:
        """The ids of ``tenant``'s indexed sessions whose words hold every one of ``words``, the last as the start
        of one (a superset of the matches among the sessions it covers)."""


@runtime_checkable
class ProvidesSearchEngine(Protocol):
    """A backend with a search engine of its own (beside its files, or in its database)."""

    def search_engine(self) -> SearchEngine:
        """The engine of this store's sessions (made once; opened by the searcher)."""
