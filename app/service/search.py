"""Search (spec 12): a session matches when its searchable text holds every word of the query, the last as a prefix.

The index (an engine of :mod:`app.backends.search.engine`: FTS5 beside the files, PostgreSQL's full-text search on
PostgreSQL) is kept off the append path: the change feed marks a changed session *dirty* (another replica's
changes included), and a background round (every ``round_seconds`` of the engine) reads what each dirty session
gained through the storage seam and writes it to the index in one transaction. A search takes the index's
candidates plus every session that is dirty or being indexed, and confirms each with the exact rule
(:mod:`app.domain.search`) on the session as it is now: the index narrows, it never decides, so an answer is never
wrong. Until a start has compared the index with the store (or while a damaged index is rebuilt), every session
counts as not indexed and is searched directly.

A fork made by this process is told to the searcher with its origin (:meth:`Searcher.forked`): its row starts from
its source's words (a superset of its seed's), so indexing it reads only what the source's row does not cover, not
the seed it copied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from app.backends.background import BackgroundLoop
from app.backends.base import Backend, each_session
from app.backends.errors import SessionCorrupt, StorageUnavailable
from app.backends.read_routing import read_from_now
from app.backends.search.engine import IndexDamaged, IndexRow, SearchEngine
from app.backends.search.sqlite_index import SqliteSearchEngine
from app.domain.listing import PageRequest
from app.domain.search import Match, Query, SearchText
from app.domain.session import Session, SessionKey

__all__ = ["ForkOrigin", "Searcher"]

logger = logging.getLogger("forklog.search")

# With at most this many candidates, each is looked up and they are sorted; with more, the list is walked in order.
FEW_CANDIDATES = 2000
# Sessions read per page while the list is walked, and events per read of a session.
WALK_PAGE = 500
READ_EVENTS = 2_000
# Sessions indexed per round (one transaction).
ROUND_SESSIONS = 2000


@dataclass(frozen=True, slots=True)
class ForkOrigin:
    """Where a fork's seed came from: the first ``count`` events of ``source`` (incarnation ``source_instance``),
    seeding the incarnation ``instance`` of the child."""

    source: SessionKey
    source_instance: str
    count: int
    instance: str


class Searcher(BackgroundLoop):
    """Searches one store's sessions, and keeps their index."""

    def __init__(self, backend: Backend, index_path: Path | None = None) -> None:
        """The index is FTS5 in ``index_path`` if given, else the backend's own engine (FTS5 in memory without)."""
        self._backend = backend
        self._index: SearchEngine
        if index_path is not None:
            self._index = SqliteSearchEngine(index_path)
        elif (engine := backend.capabilities.search_engine) is not None:
            self._index = engine()
        else:
            self._index = SqliteSearchEngine(None)
        self._dirty: set[SessionKey] = set()
        self._pending: set[SessionKey] = set()
        self._origins: dict[SessionKey, ForkOrigin] = {}  # forks not indexed yet, by child
        self._ready = False  # the index has been compared with the store: what it holds can be trusted
        self._stopped = False  # the owner stopped the indexer: nothing may start it again
        self._wake = asyncio.Event()

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    task_name = "forklog-search-index"

    def start(self) -> None:
        self._stopped = False
        super().start()

    async def stop(self) -> None:
        """Stop the indexer and close the index for good: a search still running reads the sessions themselves, and
        one that meets the closed index starts no indexer that would outlive the app."""
        self._stopped = True
        self._ready = False
        await super().stop()
        await self._index.close()

    @property
    def caught_up(self) -> bool:
        """Whether the index holds every session as it is (nothing is searched directly)."""
        return self._ready and not self._dirty and not self._pending

    def changed(self, key: SessionKey) -> None:
        """``key`` changed: searched directly until it is indexed again."""
        self._dirty.add(key)
        self._wake.set()

    def forked(self, child: SessionKey, origin: ForkOrigin) -> None:
        """``child`` was just made from ``origin`` (and is reported changed as well)."""
        self._origins[child] = origin

    async def _run(self) -> None:
        while True:
            try:
                await self._reconcile()
                while True:
                    await self._round()
                    await asyncio.sleep(self._index.round_seconds)
                    await self._wake.wait()
                    self._wake.clear()
            except asyncio.CancelledError:
                raise
            except IndexDamaged as exc:
                logger.warning("the search index failed (%s); it is rebuilt", exc)
                await self._index.reset()
            except StorageUnavailable:
                await asyncio.sleep(1.0)
            except Exception:
                logger.exception("the search index failed; it is rebuilt")
                await self._index.reset()
            self._ready = False
            await asyncio.sleep(0.5)

    async def _reconcile(self) -> None:
        """Open the index and mark dirty every session it does not hold as it is (and the rows of the gone)."""
        self._ready = False
        await self._index.open()
        self._dirty |= await self._index.stale(self._every)
        self._ready = True

    async def _every(self) -> AsyncIterator[Session]:
        for tenant in await self._backend.tenants():
            async for session in each_session(self._backend, tenant, PageRequest(WALK_PAGE)):
                yield session

    async def _round(self) -> None:
        """Index what the sessions dirty now gained, in transactions of up to ``ROUND_SESSIONS`` of them. Those that
        change meanwhile wait for the next round: under a stream of appends a round takes a second's worth of each
        session's appends at once, instead of chasing every append."""
        backlog = len(self._dirty)
        while self._dirty and backlog > 0:
            taken = set(list(self._dirty)[: min(backlog, ROUND_SESSIONS)])
            backlog -= len(taken)
            self._dirty -= taken
            self._pending = taken
            rows: list[IndexRow] = []
            dropped: list[SessionKey] = []
            indexed = await self._index.covered(taken)
            for key in taken:
                origin = self._origins.pop(key, None)
                try:
                    session = await self._backend.find(key)
                except SessionCorrupt:
                    session = None
                if session is None:
                    dropped.append(key)
                    continue
                known = indexed.get(key)
                anew = known is None or known[0] != session.header.instance or known[1] > session.head.count
                start = 0 if anew or known is None else known[1]
                text = SearchText(cwd=session.header.cwd if anew else None)
                inherited: frozenset[str] = frozenset()
                if anew and origin is not None and origin.instance == session.header.instance:
                    start, inherited = await self._inherited(origin)
                    # The child's own title may be one its source has since replaced: the source's row lost its words.
                    text.title = session.head.title
                async for event in self._events(session, start):
                    text.add(event)
                covers = (session.header.instance, session.head.count)
                rows.append(IndexRow(key, covers, inherited | text.all_words(), anew, known))
            raced = await self._index.write(rows, dropped)
            self._dirty |= raced  # another replica wrote them meanwhile: read again
            self._pending = set()

    async def _inherited(self, origin: ForkOrigin) -> tuple[int, frozenset[str]]:
        """The words a fork's row starts from, and the seq its own events are read from: its source's row's words
        (a superset of the words of every event that row covers) while the row is of the incarnation the seed came
        from, and the seed's events past what it covers; nothing (from seq 0) otherwise."""
        row = await self._index.words_of(origin.source)
        if row is None:
            return 0, frozenset()
        (instance, count), words = row
        if instance != origin.source_instance:
            return 0, frozenset()
        return min(count, origin.count), words

    async def _events(self, session: Session, start: int) -> AsyncIterator[dict[str, object]]:
        count = session.head.count
        while start < count:
            stop = min(count, start + READ_EVENTS)
            lines = await self._backend.read(session.key, start, stop)
            if not lines:
                return
            for line in lines.split(b"\n")[:-1]:
                yield orjson.loads(line)
            start = stop
            # A store that reads from memory never suspends: without this a long log would hold the event loop for
            # as long as its indexing takes, and every request would wait behind it.
            await asyncio.sleep(0)

    # -- searching ---------------------------------------------------------------------------------------------------

    async def search(self, tenant: str, q: str, request: PageRequest) -> list[tuple[Session, Match]]:
        """The page ``request`` asks for of the sessions that match ``q``, each with its match."""
        wanted = Query.of(q)
        candidates = await self._candidates(tenant, wanted)
        if candidates is not None and len(candidates) <= FEW_CANDIDATES:
            ordered = self._looked_up(tenant, candidates, request)
            return await self._confirmed(ordered, wanted, request.limit)
        return await self._confirmed(self._walk(tenant, request, candidates), wanted, request.limit)

    async def _candidates(self, tenant: str, wanted: Query) -> set[str] | None:
        """The ids that may match (None: any session may)."""
        if not self._ready or not wanted.words:
            return None
        # Taken before the index is asked too: a round may index a session and take it off these sets while the
        # query runs on a snapshot that does not hold it yet.
        unsure_before = self._unsure(tenant)
        # What the index held when those were taken (a round may have taken a session off them since its write).
        read_from_now()
        try:
            found = await self._index.candidates(tenant, wanted.words)
        except IndexDamaged as exc:
            self._ready = False
            if self._stopped:  # closed by the owner's stop while this search ran, not damaged
                return None
            logger.warning("the search index failed (%s); it is rebuilt", exc)
            await super().stop()  # the loop ends before its index is reset (not closed: it is used again)
            await self._index.reset()
            if not self._stopped:  # the owner may have stopped it meanwhile
                self.start()
            return None
        return found | unsure_before | self._unsure(tenant)

    def _unsure(self, tenant: str) -> set[str]:
        """The tenant's sessions the index may not hold as they are: changed since, or being indexed."""
        return {key.id for key in (*self._dirty, *self._pending) if key.tenant == tenant}

    async def _looked_up(self, tenant: str, ids: set[str], request: PageRequest) -> AsyncIterator[Session]:
        query, after = request.query, request.after
        sessions = []
        for session_id in ids:
            try:
                session = await self._backend.find(SessionKey(tenant, session_id))
            except SessionCorrupt:
                continue
            if session is None or not query.matches(session.header):
                continue
            if after is None or query.follows(query.key_of(session), after):
                sessions.append(session)
        sessions.sort(key=query.key_of, reverse=query.descending)
        for session in sessions:
            yield session

    async def _walk(self, tenant: str, request: PageRequest, ids: set[str] | None) -> AsyncIterator[Session]:
        """The list in the request's order from its start, those of ``ids`` only (None: all)."""
        async for session in each_session(self._backend, tenant, replace(request, limit=WALK_PAGE)):
            if ids is None or session.id in ids:
                yield session

    async def _confirmed(
        self, sessions: AsyncIterator[Session], wanted: Query, limit: int
    ) -> list[tuple[Session, Match]]:
        found: list[tuple[Session, Match]] = []
        async for session in sessions:
            text = SearchText(cwd=session.header.cwd)
            async for event in self._events(session, 0):
                text.add(event)
            match = wanted.match(text)
            if match is not None:
                found.append((session, match))
                if len(found) == limit:
                    break
        return found
