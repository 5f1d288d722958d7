"""The reads of a store whose every session is held in a :class:`~app.backends.catalog.Catalog` in this process's
memory (the memory and file backends, and the files reader): written once, so that they answer alike.

Also what a tenant holds there (spec 14's usage; spec 12's ``bytes``: each log as ``export`` writes it, header line
and event lines), its readiness, and the log a new session starts with.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from app.backends.base import CorruptEntry, Readiness, Seed, SeedLog, Tip, Usage
from app.backends.catalog import Catalog
from app.backends.errors import StaleHead
from app.domain.dsh_records import header_bytes
from app.domain.errors import SessionAlreadyExists
from app.domain.listing import PageRequest
from app.domain.log import SessionLog
from app.domain.session import Session, SessionKey
from app.domain.staging import LogTip

__all__ = ["CatalogReads", "readiness_of", "starting_log"]

CHUNK_BYTES = 4 * 1024 * 1024
# A log read whole that does not end at a turn/end (an exported log's) comes in windows of this many events.
WINDOW_EVENTS = 10_000
# Sessions are summed in pages of this many.
USAGE_PAGE = 10_000


class CatalogReads:
    """Reads answered from ``catalog`` alone (no I/O)."""

    catalog: Catalog

    async def tenants(self) -> list[str]:
        return self.catalog.tenants()

    async def find(self, key: SessionKey) -> Session | None:
        live = self.catalog.get(key)
        return live.view() if live is not None else None

    async def page(self, tenant: str, request: PageRequest) -> list[Session]:
        return [live.view() for live in self.catalog.page(tenant, request)]

    async def read(self, key: SessionKey, start: int, stop: int) -> bytes:
        live = self.catalog.get(key)
        return live.log.lines(start, stop) if live is not None else b""

    def chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]:
        live = self.catalog.get(key)
        if live is None or live.header.instance != instance:
            raise StaleHead(f'session "{key.id}" is no longer the incarnation the snapshot was checked against')
        if stop == 0 or live.log.is_turn_end(stop - 1):
            return _line_chunks(live.log.prefix(stop))  # taken now: later appends are not part of it
        # Any other end (an open turn, a log-only event): events before ``stop`` never change once stored, and the
        # log held here stays the one of this incarnation whatever happens to the session meanwhile.
        return _windows(live.log, stop)

    async def is_turn_end(self, key: SessionKey, seq: int) -> bool:
        live = self.catalog.get(key)
        return live is not None and live.log.is_turn_end(seq)

    async def history(self, key: SessionKey, at_seq: int | None) -> list[Any]:
        live = self.catalog.get(key)
        return live.log.history(at_seq) if live is not None else []

    async def tip(self, key: SessionKey, wanted: Iterable[int] = (), *, refresh: bool = False) -> Tip | None:
        live = self.catalog.get(key)
        return Tip(live.view(), live.log) if live is not None else None

    async def seed_tip(
        self, source: SessionKey, instance: str, count: int, wanted: Iterable[int] = ()
    ) -> LogTip | None:
        live = self.catalog.get(source)
        if live is None or live.header.instance != instance:
            return None
        return live.log.tip_at(count)  # every event is at hand: ``wanted`` needs no fetching

    def usage(self, tenant: str) -> Usage:
        sessions = size = 0
        request = PageRequest(USAGE_PAGE)
        while True:
            page = self.catalog.page(tenant, request)
            for live in page:
                size += header_bytes(live.header) + live.body_bytes()
            sessions += len(page)
            if len(page) < USAGE_PAGE:
                return Usage(sessions, size)
            request = PageRequest(USAGE_PAGE, after=page[-1].order_key)

    def log_bytes(self, key: SessionKey, count: int) -> int:
        live = self.catalog.live(key)
        return live.log.offset(min(count, len(live.log))) if live is not None else 0


def readiness_of(catalog: Catalog, corrupt: Sequence[CorruptEntry], tenant: str | None) -> Readiness:
    """The live sessions and the corrupt ones of every tenant, or of ``tenant`` only."""
    if tenant is None:
        return Readiness(len(catalog), list(corrupt))
    return Readiness(catalog.count(tenant), [entry for entry in corrupt if entry.tenant == tenant])


def starting_log(catalog: Catalog, key: SessionKey, seed: Seed) -> SessionLog:
    """The events the new session ``key`` starts with: the seed's, or the source's first ``count`` (shared, not
    copied) and the fork's own events, staged by the service, after them; SessionAlreadyExists if ``key`` is live."""
    if catalog.get(key) is not None:
        raise SessionAlreadyExists(key.id)
    if isinstance(seed, SeedLog):
        return seed.log
    source = catalog.get(seed.source)
    if source is None or source.header.instance != seed.instance:
        raise StaleHead(f'session "{seed.source.id}" is no longer the incarnation the fork was checked against')
    return source.log.prefix(seed.count, seed.then)  # the log is not live yet: nothing else sees the commit


async def _line_chunks(log: SessionLog) -> AsyncIterator[bytes]:
    for piece in log.line_chunks(CHUNK_BYTES):
        yield piece


async def _windows(log: SessionLog, stop: int) -> AsyncIterator[bytes]:
    for start in range(0, stop, WINDOW_EVENTS):
        yield log.lines(start, min(stop, start + WINDOW_EVENTS))
