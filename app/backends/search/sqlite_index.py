"""The search engine beside the files (or in memory): SQLite's FTS5 (the standard library's ``sqlite3``).

One row per session holds the set of its searchable words (lower case, as :func:`app.domain.search.words` cuts
them, each after its tenant's tag: :func:`app.backends.search.engine.tagged`, so FTS5's ``unicode61`` tokenizer sees
each as exactly one token; ``remove_diacritics 0``: diacritics do not fold) and, beside it, which incarnation and how
many events it covers. A query's terms carry the caller's tag too: FTS5 looks up only that tenant's terms (a prefix
expands to the tenant's own words), never filtering another tenant's matches out after. The file's
``user_version`` names its layout; a file of another layout (an older forklog's, whose words had no tag) is
rebuilt at start, as a damaged one is: the index is derived data. A row only ever gains words (a renamed
session keeps its old title's words until it is indexed anew): the index answers a superset of the matches, and the
exact rule decides. Every call runs in one worker thread at a time; a damaged file is replaced. Only this process
writes it, so :class:`SqliteSearchEngine` keeps what each row covers in memory too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from app.backends.errors import ChangeRefused
from app.backends.search.engine import IndexDamaged, IndexedSession, IndexRow, SessionWalk, tagged, untagged
from app.domain.session import SessionKey

__all__ = ["LAYOUT", "SearchIndex", "SqliteSearchEngine", "match_text"]

logger = logging.getLogger("forklog.search")

# The layout this code writes (``PRAGMA user_version``). 1: every word after its tenant's tag. 0 (no version): an
# older forklog's words without a tag.
LAYOUT = 1

_DROP = """
DROP TABLE IF EXISTS docs;
DROP TABLE IF EXISTS indexed;
"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS indexed (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    instance TEXT NOT NULL,
    count INTEGER NOT NULL,
    doc INTEGER NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS indexed_doc ON indexed (doc);
CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(words, tokenize = "unicode61 remove_diacritics 0");
"""


# SQLite's primary result codes for a full disk and an I/O error (sqlite3's constants are not typed in every stub).
_SPACE_OR_DISK = frozenset({13, 10})  # SQLITE_FULL, SQLITE_IOERR


def _refuse_if_disk(exc: sqlite3.DatabaseError) -> None:
    """ChangeRefused when ``exc`` is a full or failing disk: not a damaged index, so the index (and the space it
    holds) is kept and the work is tried again later."""
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _SPACE_OR_DISK:
        raise ChangeRefused(f"the search index cannot be written: {exc}") from exc


def match_text(tenant: str, words: tuple[str, ...]) -> str:
    """The FTS5 query of ``tenant``'s search for ``words``: every word whole, the last as a prefix, each tagged."""
    *whole, last = tagged(tenant, words)
    return " AND ".join([f'"{word}"' for word in whole] + [f'"{last}"*'])


class SearchIndex:
    """The FTS5 index in ``path`` (None: in memory, for a store that keeps nothing across a restart)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None
        # One call at a time: a call left running by a cancelled task must end before the connection is closed.
        self._busy = threading.Lock()

    def _open_unlocked(self) -> dict[SessionKey, IndexedSession]:
        """Open (or make) the index, replacing a damaged one; what each row covers."""
        try:
            return self._open()
        except sqlite3.DatabaseError as exc:
            _refuse_if_disk(exc)
            logger.warning("the search index %s is damaged (%s); it is rebuilt", self._path, exc)
            self._reset_unlocked()
            return self._open()

    def _open(self) -> dict[SessionKey, IndexedSession]:
        self._close_unlocked()
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(":memory:" if self._path is None else str(self._path), check_same_thread=False)
        self._db = db
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")  # a crash may lose the last rounds: a start finds them stale
        if db.execute("PRAGMA user_version").fetchone()[0] != LAYOUT:
            # Another layout's words would never match this one's queries: its rows go, and a start indexes anew.
            db.executescript(_DROP)
            db.execute(f"PRAGMA user_version = {LAYOUT}")
        db.executescript(_SCHEMA)
        if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("quick_check failed")
        db.execute("INSERT INTO docs(docs) VALUES ('integrity-check')")
        return {
            SessionKey(tenant, session_id): (instance, count)
            for tenant, session_id, instance, count in db.execute("SELECT tenant, id, instance, count FROM indexed")
        }

    def _reset_unlocked(self) -> None:
        """Drop the index file: the next open starts empty."""
        self._close_unlocked()
        if self._path is not None:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    Path(f"{self._path}{suffix}").unlink()

    def _close_unlocked(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise IndexDamaged("the search index is not open")
        return self._db

    def _write_unlocked(
        self, rows: Iterable[tuple[SessionKey, IndexedSession, set[str], bool]], dropped: Iterable[SessionKey]
    ) -> None:
        """In one transaction: for each row, the session's words (added to those kept, or instead of them when the
        last member says the row starts anew) and what it covers now; and the dropped sessions' rows gone."""
        db = self._connection()
        try:
            with db:
                for key in dropped:
                    self._drop(db, key)
                for key, (instance, count), words, anew in rows:
                    found = db.execute(
                        "SELECT doc FROM indexed WHERE tenant = ? AND id = ?", (key.tenant, key.id)
                    ).fetchone()
                    kept: set[str] = set()
                    if found is not None:
                        if not anew:
                            text = db.execute("SELECT words FROM docs WHERE rowid = ?", (found[0],)).fetchone()
                            kept = set(text[0].split()) if text is not None else set()
                        db.execute("DELETE FROM docs WHERE rowid = ?", (found[0],))
                    text_now = " ".join(sorted(kept.union(tagged(key.tenant, words))))
                    doc = db.execute("INSERT INTO docs (words) VALUES (?)", (text_now,))
                    db.execute(
                        "INSERT OR REPLACE INTO indexed (tenant, id, instance, count, doc) VALUES (?, ?, ?, ?, ?)",
                        (key.tenant, key.id, instance, count, doc.lastrowid),
                    )
        except sqlite3.DatabaseError as exc:
            _refuse_if_disk(exc)
            raise IndexDamaged(str(exc)) from exc

    @staticmethod
    def _drop(db: sqlite3.Connection, key: SessionKey) -> None:
        found = db.execute("SELECT doc FROM indexed WHERE tenant = ? AND id = ?", (key.tenant, key.id)).fetchone()
        if found is not None:
            db.execute("DELETE FROM docs WHERE rowid = ?", (found[0],))
            db.execute("DELETE FROM indexed WHERE tenant = ? AND id = ?", (key.tenant, key.id))

    def _candidates_unlocked(self, tenant: str, words: tuple[str, ...]) -> set[str]:
        """The ids of ``tenant``'s indexed sessions whose words hold every one of ``words``, the last as a prefix
        (a superset of the matches: the exact rule decides)."""
        db = self._connection()
        try:
            # "+tenant": the rows are found by their documents (a few), never by walking the tenant's (all of them);
            # kept though the tag confines the match: two tenants' tags may be equal (by a chance no one meets).
            rows = db.execute(
                "SELECT id FROM indexed WHERE doc IN (SELECT rowid FROM docs WHERE docs MATCH ?) AND +tenant = ?",
                (match_text(tenant, words), tenant),
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise IndexDamaged(str(exc)) from exc
        return {row[0] for row in rows}

    def _words_of_unlocked(self, key: SessionKey) -> tuple[IndexedSession, frozenset[str]] | None:
        """What ``key``'s row covers and its words."""
        db = self._connection()
        try:
            found = db.execute(
                "SELECT i.instance, i.count, d.words FROM indexed i JOIN docs d ON d.rowid = i.doc"
                " WHERE i.tenant = ? AND i.id = ?",
                (key.tenant, key.id),
            ).fetchone()
        except sqlite3.DatabaseError as exc:
            raise IndexDamaged(str(exc)) from exc
        if found is None:
            return None
        instance, count, words = found
        return (instance, count), untagged(words.split())

    def open(self) -> dict[SessionKey, IndexedSession]:
        """Open (or make) the index, replacing a damaged one; what each row covers."""
        with self._busy:
            return self._open_unlocked()

    def reset(self) -> None:
        """Drop the index file: the next open starts empty."""
        with self._busy:
            self._reset_unlocked()

    def close(self) -> None:
        with self._busy:
            self._close_unlocked()

    def write(
        self, rows: Iterable[tuple[SessionKey, IndexedSession, set[str], bool]], dropped: Iterable[SessionKey]
    ) -> None:
        """See :meth:`_write_unlocked`."""
        with self._busy:
            self._write_unlocked(rows, dropped)

    def candidates(self, tenant: str, words: tuple[str, ...]) -> set[str]:
        """See :meth:`_candidates_unlocked`."""
        with self._busy:
            return self._candidates_unlocked(tenant, words)

    def words_of(self, key: SessionKey) -> tuple[IndexedSession, frozenset[str]] | None:
        """See :meth:`_words_of_unlocked`."""
        with self._busy:
            return self._words_of_unlocked(key)


class SqliteSearchEngine:
    """The :class:`~app.backends.search.engine.SearchEngine` of an FTS5 index in ``path`` (None: in memory)."""

    round_seconds = 0.25

    def __init__(self, path: Path | None) -> None:
        self._index = SearchIndex(path)
        self._indexed: dict[SessionKey, IndexedSession] = {}
        self._lock = asyncio.Lock()  # one call at a time, so that none waits for the worker thread's lock

    async def open(self) -> None:
        async with self._lock:
            self._indexed = await asyncio.to_thread(self._index.open)

    async def reset(self) -> None:
        async with self._lock:
            self._indexed = {}
            await asyncio.to_thread(self._index.reset)

    async def close(self) -> None:
        await asyncio.to_thread(self._index.close)

    async def stale(self, every: SessionWalk) -> set[SessionKey]:
        live: set[SessionKey] = set()
        found: set[SessionKey] = set()
        async for session in every():
            live.add(session.key)
            if self._indexed.get(session.key) != (session.header.instance, session.head.count):
                found.add(session.key)
        return found | (set(self._indexed) - live)

    async def covered(self, keys: Collection[SessionKey]) -> dict[SessionKey, IndexedSession]:
        return {key: self._indexed[key] for key in keys if key in self._indexed}

    async def write(self, rows: Sequence[IndexRow], dropped: Collection[SessionKey]) -> set[SessionKey]:
        written = [(row.key, row.covers, set(row.words), row.anew) for row in rows]
        async with self._lock:
            await asyncio.to_thread(self._index.write, written, dropped)
        for row in rows:
            self._indexed[row.key] = row.covers
        for key in dropped:
            self._indexed.pop(key, None)
        return set()

    async def candidates(self, tenant: str, words: tuple[str, ...]) -> set[str]:
        async with self._lock:
            return await asyncio.to_thread(self._index.candidates, tenant, words)

    async def words_of(self, key: SessionKey) -> tuple[IndexedSession, frozenset[str]] | None:
        if key not in self._indexed:  # only this process writes the index: no row, nothing to read
            return None
        async with self._lock:
            return await asyncio.to_thread(self._index.words_of, key)
