"""The spec's reads of sessions (spec 2, 7): one session, a page of them, its log (with a long-poll), its model
history, its live tail and its lineage. A read takes no lock: what it sees is a backend's consistent answer of the
moment."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from app.backends.base import Backend
from app.backends.errors import SessionCorrupt, StaleHead
from app.backends.read_routing import read_from_now
from app.domain.errors import ErrorCode, InvalidValue, SessionError, session_not_found
from app.domain.listing import ListQuery, OrderKey, PageRequest
from app.domain.search import Match
from app.domain.session import Session, SessionKey
from app.service.boundaries import seed_length_at
from app.service.changes import ChangeFeed
from app.service.observer import SessionObserver
from app.service.retention import Retention, is_expired, visible_page
from app.service.search import Searcher
from app.service.transfer.dsh_log import LogEncoding, log_with_header

__all__ = ["LINEAGE_CHILDREN", "TAIL_BATCH", "Deleted", "Lineage", "SessionReads", "TailEvents", "find_live"]

# A live tail reads at most this many events at a time: a reader that falls behind costs one such batch.
TAIL_BATCH = 128
# At most this many children are listed by a lineage (spec 7); GET /sessions?parent= pages further.
LINEAGE_CHILDREN = 1000


def _always() -> bool:
    """A reader's right to read that never ends (the default of :meth:`SessionReads.read` and ``tail``)."""
    return True


@dataclass(frozen=True, slots=True)
class TailEvents:
    """Events of a live tail: the JSONL lines of events ``first_seq`` onward."""

    first_seq: int
    lines: bytes


@dataclass(frozen=True, slots=True)
class Deleted:
    """The tailed session was deleted (or replaced by a new incarnation): the tail ends."""

    id: str


@dataclass(frozen=True, slots=True)
class Lineage:
    ancestors: list[Session]
    children: list[Session]
    missing_ancestor: str | None


async def find_live(backend: Backend, key: SessionKey, error: type[SessionError] = SessionError) -> Session:
    """The live session, or SESSION_NOT_FOUND as an ``error``."""
    session = await backend.find(key)
    if session is None:
        raise session_not_found(key.id, error)
    return session


class SessionReads:
    """The reads, each once the service is ready (``require_ready`` refuses with NOT_READY before)."""

    def __init__(
        self,
        backend: Backend,
        *,
        require_ready: Callable[[], None],
        changes: ChangeFeed,
        retention: Retention,
        searcher: Searcher,
        observer: SessionObserver,
    ) -> None:
        self._backend = backend
        self._require_ready = require_ready
        self._changes = changes
        self._retention = retention
        self._searcher = searcher
        self._observer = observer

    async def get(self, key: SessionKey) -> Session:
        self._require_ready()
        return await find_live(self._backend, key)

    async def page(
        self, tenant: str, request: PageRequest, q: str | None = None
    ) -> tuple[list[tuple[Session, Match | None]], OrderKey | None]:
        """The page ``request`` asks for (with ``q``, of the sessions that match it, each with its match), and the
        key to continue from (None at the end)."""
        self._require_ready()
        cutoff = self._retention.cutoff(tenant)  # expired sessions never show, even before they are deleted
        limit, query = request.limit, request.query
        found: list[tuple[Session, Match | None]]
        if q is not None:
            matched = await self._searcher.search(tenant, q, replace(request, limit=limit + 1))
            found = list(matched)
            if cutoff is not None:
                # What the search found beyond its expired sessions is still in order: its next page starts after
                # the last one looked at, so nothing is skipped (a page may come back short).
                kept = [(session, match) for session, match in found if not is_expired(session, cutoff)]
                if len(found) <= limit:
                    return kept, None
                return kept[:limit], query.key_of(found[limit - 1][0])
        else:
            sessions = await visible_page(self._backend, tenant, replace(request, limit=limit + 1), cutoff)
            found = [(session, None) for session in sessions]
        if len(found) <= limit:
            return found, None
        return found[:limit], query.key_of(found[limit - 1][0])

    async def read(
        self, key: SessionKey, start: int, limit: int, *, wait_ms: int = 0, allowed: Callable[[], bool] = _always
    ) -> tuple[bytes, int]:
        """The JSONL lines of up to ``limit`` events from ``start``, and the log's length. With ``wait_ms``, when the
        log holds no event at ``start`` or after, wait up to that long for one (a long-poll, spec 7); the wait ends
        early once ``allowed`` (asked at each wake-up) says the reader may no longer read."""
        self._require_ready()
        deadline = asyncio.get_running_loop().time() + wait_ms / 1000
        while True:
            ticket = self._changes.ticket(key)
            session = await find_live(self._backend, key)
            count = session.head.count
            left = deadline - asyncio.get_running_loop().time()
            if start < count or left <= 0 or self._changes.closed or not allowed():
                break
            await ticket.wait(left)
            read_from_now()  # woken by a change: the next look sees it (on a standby, once replayed)
        lines = await self._backend.read(key, start, min(count, start + limit)) if start < count else b""
        return lines, count

    async def log(self, key: SessionKey, encoding: LogEncoding) -> AsyncIterator[bytes]:
        """The session's DSH log as ``export`` writes it (spec 16), in ``encoding``: the header line, then every event
        stored now (later appends are not part of it), a piece at a time."""
        self._require_ready()
        session = await find_live(self._backend, key)
        try:
            lines = self._backend.chunks(key, session.header.instance, session.head.count)
        except StaleHead:
            raise session_not_found(key.id) from None
        return log_with_header(session.header, lines, encoding)

    async def history(self, key: SessionKey, at_seq: int | None) -> tuple[list[Any], int]:
        """The model history, now or at the ``turn/end`` ``at_seq``; and the log's length."""
        self._require_ready()
        session = await find_live(self._backend, key)
        if at_seq is not None:
            await seed_length_at(self._backend, session, at_seq)
        return await self._backend.history(key, at_seq), session.head.count

    async def tail(
        self,
        key: SessionKey,
        *,
        start: int = 0,
        last_event_id: int | None = None,
        instance: str | None = None,
        allowed: Callable[[], bool] = _always,
    ) -> AsyncIterator[TailEvents | Deleted]:
        """A live tail (spec 7): every event from ``start`` (or after ``last_event_id``, which wins), then each new
        one as it is stored, until the session is deleted (a last :class:`Deleted`), the service stops or
        ``allowed`` says the reader may no longer read: asked after each read of the log, before its events are
        handed on, and at a wake-up with nothing to send (whoever can end the right wakes every tail,
        ``changes.wake_everyone``). Refusals come before the first item, when this is called."""
        self._require_ready()
        session = await find_live(self._backend, key)
        if instance is not None and instance != session.header.instance:
            raise SessionError(
                ErrorCode.SESSION_NOT_LIVE,
                f'instance "{instance}" is not the live incarnation of session "{key.id}"; re-read the session',
            )
        count = session.head.count
        if last_event_id is not None:
            if last_event_id >= count:
                detail = f"Last-Event-ID {last_event_id} is not an event of the session (it has {count}); reconnect"
                raise InvalidValue("Last-Event-ID", detail, "beyond the log")
            start = last_event_id + 1
        elif start > count:
            detail = f"from {start} is beyond the log's length {count}; pick a seq up to it"
            raise InvalidValue("from", detail, "beyond the log")
        return self._follow(key, session.header.instance, start, allowed)

    async def _follow(
        self, key: SessionKey, instance: str, position: int, allowed: Callable[[], bool]
    ) -> AsyncIterator[TailEvents | Deleted]:
        self._observer.streams(key.tenant, 1)
        try:
            async for item in self._follow_from(key, instance, position, allowed):
                yield item
        finally:
            self._observer.streams(key.tenant, -1)

    async def _follow_from(
        self, key: SessionKey, instance: str, position: int, allowed: Callable[[], bool]
    ) -> AsyncIterator[TailEvents | Deleted]:
        # One ticket per look at the session: taken before the look, it wakes the tail for any change the look
        # missed, whether the look found events to send or not.
        while True:
            ticket = self._changes.ticket(key)
            read_from_now()  # each look sees every change it was woken for (on a standby, once replayed)
            try:
                session = await self._backend.find(key)
            except SessionCorrupt:
                session = None
            if session is None or session.header.instance != instance:
                if allowed():
                    yield Deleted(key.id)
                return
            count = session.head.count
            asked = False
            while position < count:
                lines = await self._backend.read(key, position, min(count, position + TAIL_BATCH))
                if not lines:
                    break
                # Asked after the read: an event stored after the reader lost its right is never handed on.
                if not allowed():
                    return
                asked = True
                yield TailEvents(position, lines)
                position += lines.count(b"\n")
            if self._changes.closed:
                return
            # A wake-up with nothing to send asks too: whatever ends a reader's right wakes every tail to ask.
            if not asked and not allowed():
                return
            await ticket.wait()

    async def lineage(self, key: SessionKey) -> Lineage:
        """The session's ancestors while each parent is live (a cycle stops before an id already listed), the first
        parent that is not live, and its children in list order (spec 7)."""
        self._require_ready()
        session = await find_live(self._backend, key)
        ancestors: list[Session] = []
        seen = {key.id}
        missing: str | None = None
        parent = session.header.parent_session
        cutoff = self._retention.cutoff(key.tenant)
        while parent is not None and parent not in seen:
            try:
                found = await self._backend.find(SessionKey(key.tenant, parent))
            except SessionCorrupt:
                found = None
            if found is None or is_expired(found, cutoff):
                missing = parent
                break
            ancestors.append(found)
            seen.add(parent)
            parent = found.header.parent_session
        children_of = PageRequest(LINEAGE_CHILDREN, query=ListQuery(parent=key.id))
        children = await visible_page(self._backend, key.tenant, children_of, cutoff)
        return Lineage(ancestors, children, missing)
