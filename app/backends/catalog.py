"""The live sessions one process holds in memory, for the backends that keep every log in memory (memory, files).

Sessions are found by key, listed in creation order per tenant (and per parent, for lineage) or in the order of
their last activity (``updatedAt``, per tenant: kept sorted, a session whose log grew moving when that order is
next read, so a page of the most recent ones costs O(log n + page) beyond those moves, spec 12), and given their
``createdAt``: max(now, 1 + the largest one this process has loaded or assigned *for that tenant*), corrupt sessions'
included, so creation order holds even if the clock steps back. The clock is per tenant (spec 9): a shared one
would let a tenant count another's creates from the gaps between its own ``createdAt`` values.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from sortedcontainers import SortedList

from app.backends.errors import SessionCorrupt, StaleHead
from app.domain.listing import CREATED, ListQuery, OrderKey, PageRequest
from app.domain.log import SessionLog
from app.domain.session import LogHead, Session, SessionHeader, SessionKey, head_of

__all__ = ["Catalog", "FrozenLog", "LiveSession"]


class FrozenLog(Protocol):
    """A log kept in a backend's compact encoding until it is first needed (many idle sessions cost little)."""

    def thaw(self) -> SessionLog:
        """The log itself."""

    def head(self) -> LogHead:
        """Where the log stands, without thawing it."""

    def body_bytes(self) -> int:
        """The bytes of the log's lines, without thawing it."""

    def last_time(self) -> int | None:
        """The time of the last event (None for an empty log), without thawing it."""


class LiveSession:
    """A live session held in memory: its key, its header, its log (the log grows; the header changes only when the
    session is archived or unarchived) and ``changed_at``, when its last change was acknowledged by the server's
    clock (what retention counts from).

    ``checkpointed`` is the file backend's: how many of the log's events a durable checkpoint covers, or -1 when
    the session's file does not hold the log's bytes as they are in memory (a DSH log with packed rows): such a
    session is never checkpointed, and a fork of it is written from memory.

    ``frames`` is the file backend's too: where the frames of a compressed (``.jsonl.zstd``) file end, else None.
    """

    __slots__ = ("_log", "changed_at", "checkpointed", "frames", "header", "key", "updated_at")

    def __init__(
        self,
        key: SessionKey,
        header: SessionHeader,
        log: SessionLog | FrozenLog,
        *,
        changed_at: int,
        checkpointed: int = 0,
        frames: Any = None,
    ) -> None:
        self.key = key
        self.header = header
        self._log = log
        self.changed_at = changed_at
        self.checkpointed = checkpointed
        self.frames = frames
        self.updated_at = self.last_activity()  # the catalog's copy: where it stands in the order by updatedAt

    @property
    def id(self) -> str:
        return self.key.id

    @property
    def log(self) -> SessionLog:
        """The log (a frozen one is thawed on first use)."""
        log = self._log
        if not isinstance(log, SessionLog):
            log = self._log = log.thaw()
        return log

    @property
    def frozen(self) -> bool:
        return not isinstance(self._log, SessionLog)

    def freeze(self, frozen: FrozenLog) -> None:
        """Keep the log as ``frozen`` (the same log, encoded) until it is next used."""
        self._log = frozen

    def body_bytes(self) -> int:
        """The bytes of the log's event lines (a frozen log is not thawed)."""
        log = self._log
        return log.byte_size if isinstance(log, SessionLog) else log.body_bytes()

    def view(self) -> Session:
        log = self._log
        head = head_of(log.state) if isinstance(log, SessionLog) else log.head()
        return Session(self.key, self.header, head, self.changed_at)

    def last_activity(self) -> int:
        """``updatedAt``: the later of ``createdAt`` and the time of the last event."""
        log = self._log
        last_time = log.state.last_time if isinstance(log, SessionLog) else log.last_time()
        created_at = self.header.created_at
        return created_at if last_time is None or last_time < created_at else int(last_time)

    @property
    def order_key(self) -> OrderKey:
        return (self.header.created_at, self.header.id)


def _order_of(live: LiveSession) -> OrderKey:
    return live.order_key


@dataclass(slots=True)
class _Ordered:
    """Sessions in creation order, kept sorted (the sessions themselves: no key tuple is kept per session)."""

    sessions: list[LiveSession]

    def add(self, live: LiveSession) -> None:
        insort(self.sessions, live, key=_order_of)

    def remove(self, live: LiveSession) -> None:
        at = bisect_left(self.sessions, live.order_key, key=_order_of)
        if at < len(self.sessions) and self.sessions[at] is live:
            del self.sessions[at]

    def after(self, key: OrderKey | None) -> Iterator[LiveSession]:
        start = 0 if key is None else bisect_right(self.sessions, key, key=_order_of)
        for at in range(start, len(self.sessions)):
            yield self.sessions[at]

    def before(self, key: OrderKey | None) -> Iterator[LiveSession]:
        """The sessions before ``key``, last first."""
        stop = len(self.sessions) if key is None else bisect_left(self.sessions, key, key=_order_of)
        for at in range(min(stop, len(self.sessions)) - 1, -1, -1):
            yield self.sessions[at]


class Catalog:
    """Live and corrupt sessions by key, and each tenant's ``createdAt`` clock."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self._live: dict[SessionKey, LiveSession] = {}
        self._corrupt: dict[SessionKey, str] = {}
        self._by_tenant: dict[str, _Ordered] = {}
        self._by_parent: dict[tuple[str, str], _Ordered] = {}
        self._max_created_at: dict[str, int] = {}  # by tenant
        self._by_update: dict[str, SortedList] = {}  # per tenant: (updatedAt, id) of each live session
        # Sessions whose log grew since the order by updatedAt was last read: moved in it at that read (see touch).
        self._moved: dict[LiveSession, None] = {}

    def __len__(self) -> int:
        return len(self._live)

    def get(self, key: SessionKey) -> LiveSession | None:
        """The live session, or None; :class:`SessionCorrupt` for one kept out of service."""
        if key in self._corrupt:
            raise SessionCorrupt(key.id, self._corrupt[key])
        return self._live.get(key)

    def live(self, key: SessionKey) -> LiveSession | None:
        """The live session, or None (also for one kept out of service)."""
        return self._live.get(key)

    def count(self, tenant: str) -> int:
        """How many sessions of ``tenant`` are live (kept by the tenant's index: no pass over its sessions)."""
        ordered = self._by_tenant.get(tenant)
        return len(ordered.sessions) if ordered is not None else 0

    def __iter__(self) -> Iterator[LiveSession]:
        return iter(list(self._live.values()))

    def now(self) -> int:
        """The clock's reading: when a change made now is acknowledged (a session's ``changed_at``)."""
        return self._clock()

    def stamp(self, tenant: str) -> int:
        """A new session's ``createdAt`` in ``tenant``."""
        created_at = self._max_created_at[tenant] = max(self._clock(), self._max_created_at.get(tenant, -1) + 1)
        return created_at

    def new_header(self, key: SessionKey, instance: str, lineage: Mapping[str, Any]) -> SessionHeader:
        return SessionHeader(id=key.id, created_at=self.stamp(key.tenant), instance=instance, **lineage)

    def _saw(self, tenant: str, created_at: int) -> None:
        """Later creates in ``tenant`` follow ``created_at``."""
        if created_at > self._max_created_at.get(tenant, -1):
            self._max_created_at[tenant] = created_at

    def add(self, live: LiveSession) -> None:
        self._live[live.key] = live
        self._index(live, sort=True)
        self._saw(live.key.tenant, live.header.created_at)

    def load(self, sessions: Iterable[LiveSession]) -> None:
        """Add many sessions at once (a start): sorted once at the end instead of one insertion each."""
        for live in sessions:
            self._live[live.key] = live
            self._index(live, sort=False)
            self._saw(live.key.tenant, live.header.created_at)
        for ordered in (*self._by_tenant.values(), *self._by_parent.values()):
            ordered.sessions.sort(key=_order_of)
        for tenant, ordered in self._by_tenant.items():
            self._by_update[tenant] = SortedList((live.updated_at, live.id) for live in ordered.sessions)

    def _index(self, live: LiveSession, *, sort: bool) -> None:
        if sort:
            self._by_update.setdefault(live.key.tenant, SortedList()).add((live.updated_at, live.id))
        indexes = [self._by_tenant.setdefault(live.key.tenant, _Ordered([]))]
        parent = live.header.parent_session
        if parent is not None:
            indexes.append(self._by_parent.setdefault((live.key.tenant, parent), _Ordered([])))
        for ordered in indexes:
            if sort:
                ordered.add(live)
            else:
                ordered.sessions.append(live)

    def remove(self, key: SessionKey) -> None:
        live = self._live.pop(key, None)
        if live is None:
            return
        self._by_tenant[key.tenant].remove(live)
        self._by_update[key.tenant].discard((live.updated_at, live.id))  # where it stands, moved or not
        self._moved.pop(live, None)
        parent = live.header.parent_session
        if parent is not None:
            self._by_parent[(key.tenant, parent)].remove(live)

    def incarnation(self, key: SessionKey, instance: str, expected_count: int | None = None) -> LiveSession | None:
        """The live incarnation ``instance`` of ``key``; None if it is not live or (with ``expected_count``) its log
        has another length."""
        live = self.get(key)
        if live is None or live.header.instance != instance:
            return None
        if expected_count is not None and len(live.log) != expected_count:
            return None
        return live

    def set_archived(self, live: LiveSession, archived: bool) -> None:
        """Mark the live session archived (or not): its header changes, not its place in any order."""
        if live.header.archived != archived:
            live.header = replace(live.header, archived=archived)

    def tenants(self) -> list[str]:
        return sorted(tenant for tenant, ordered in self._by_tenant.items() if ordered.sessions)

    def quarantine(self, key: SessionKey, reason: str, *, created_at: int | None = None) -> None:
        """Keep a damaged session out of service; its ``created_at`` (if its header was read) still counts."""
        self._corrupt[key] = reason
        if created_at is not None:
            self._saw(key.tenant, created_at)

    def staged_on(self, key: SessionKey, base_count: int) -> LiveSession:
        """The live session an append staged on its first ``base_count`` events goes to; StaleHead if it is gone or
        has grown since (the append must be staged again)."""
        live = self.get(key)
        if live is None:
            raise StaleHead(f'session "{key.id}" is no longer live')
        if base_count != len(live.log):
            raise StaleHead(f'session "{key.id}" has {len(live.log)} events, not the {base_count} staged on')
        return live

    def touch(self, live: LiveSession) -> None:
        """``live``'s log grew, acknowledged now (its ``changed_at``): it moves in the order by ``updatedAt`` when
        that order is next read. Moving it on every append cost a SortedList removal and insertion each (a few
        percent of an append); once a read, a session that grew many times meanwhile moves once, and a page still
        costs O(log n + page) beyond the moves."""
        live.changed_at = self._clock()
        self._moved[live] = None

    def _settle_moves(self) -> None:
        """Move every session whose log grew since the last read to where its ``updatedAt`` puts it."""
        moved, self._moved = self._moved, {}
        for live in moved:
            updated_at = live.last_activity()
            if updated_at == live.updated_at or self._live.get(live.key) is not live:
                continue
            by_update = self._by_update[live.key.tenant]
            by_update.discard((live.updated_at, live.id))
            live.updated_at = updated_at
            by_update.add((updated_at, live.id))

    def page(self, tenant: str, request: PageRequest) -> list[LiveSession]:
        query = request.query
        found: list[LiveSession] = []
        for live in self._in_order(tenant, request.after, query):
            if len(found) == request.limit:
                break
            if query.matches(live.header):
                found.append(live)
        return found

    def _in_order(self, tenant: str, after: OrderKey | None, query: ListQuery) -> Iterator[LiveSession]:
        """The tenant's sessions (or ``parent``'s children, in creation order) from ``after`` on, in the query's
        order and direction (filters not applied)."""
        if query.order == CREATED:
            parent = query.parent
            ordered = self._by_tenant.get(tenant) if parent is None else self._by_parent.get((tenant, parent))
            if ordered is not None:
                yield from ordered.before(after) if query.descending else ordered.after(after)
            return
        if self._moved:
            self._settle_moves()
        by_update = self._by_update.get(tenant)
        if by_update is None:
            return
        if query.descending:
            keys = by_update.irange(maximum=after, inclusive=(True, False), reverse=True)
        else:
            keys = by_update.irange(minimum=after, inclusive=(False, True))
        for _, session_id in keys:
            live = self._live.get(SessionKey(tenant, session_id))
            if live is not None:
                yield live
