"""The search engine seam (spec 12): what :class:`app.service.search.Searcher` asks of an index of words.

An engine keeps, per session, a superset of the words of its searchable text (as :func:`app.domain.search.words`
cuts them) and which incarnation and how many events that covers. It only narrows a search down: the service
confirms every candidate with the exact rule on the session as it is, and searches directly every session the
engine does not cover yet. So an engine may answer too many sessions, never too few of those it covers.

Engines: SQLite's FTS5 (:mod:`app.backends.search.sqlite_index`) beside the files or in memory, and PostgreSQL's own
full-text search (:mod:`app.backends.postgres.search`), which every replica shares. A backend names its engine
(its ``search_engine`` capability); one that does not gets an FTS5 index in memory.

Every engine stores a word as its tenant's tag followed by the word (:func:`tagged`), and matches a query's words
tagged with the caller's tenant: the engine's own lookup (a prefix's range of terms, a word's list of rows) then
never reaches another tenant's words, so no search does work in proportion to them (spec 9: how long a search takes
tells nothing of another tenant).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from app.domain.session import Session, SessionKey

__all__ = [
    "TAG_CHARACTERS",
    "IndexDamaged",
    "IndexRow",
    "IndexedSession",
    "SearchEngine",
    "SessionWalk",
    "tag_of",
    "tagged",
    "untagged",
]

IndexedSession = tuple[str, int]  # the incarnation and how many of its events a row covers

# Every live session of every tenant, in any order (how an engine that cannot tell by itself finds what it lacks).
SessionWalk = Callable[[], AsyncIterator[Session]]

# Hex digits of a tag: a fixed length, so that no tenant's tagged words begin with another tenant's tag; 64 bits, so
# that two tenants share one only by a chance no one meets (and if they did: candidates, which the service confirms
# on its own tenant's sessions, never an answer).
TAG_CHARACTERS = 16


def tag_of(tenant: str) -> str:
    """The mark put before each of ``tenant``'s words in an index: letters and digits only (a word's own
    characters), so that the tagged word stays one token of the engine's."""
    return hashlib.sha256(tenant.encode()).hexdigest()[:TAG_CHARACTERS]


def tagged(tenant: str, words: Iterable[str]) -> list[str]:
    """``words`` as ``tenant``'s index stores and matches them."""
    tag = tag_of(tenant)
    return [tag + word for word in words]


def untagged(stored: Iterable[str]) -> frozenset[str]:
    """The words of an index row as the tenant wrote them (each stored word without its tag)."""
    return frozenset(word[TAG_CHARACTERS:] for word in stored)


class IndexDamaged(Exception):
    """The index cannot be read or written: it is rebuilt, and searches meanwhile read the sessions themselves. The
    searcher handles it every time, so it is never an answer (not a :class:`~app.domain.errors.ForklogError`)."""


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
