"""The in-memory backend: every session lives in this process's memory and nowhere else.

It really stores (everything the contract promises within one process's life holds), so the service can run on it
for tests and trials (``FORKLOG_BACKEND=memory``); a restart starts empty.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from app.backends.base import ChangeListener, IdempotencyRecord, Readiness, Remember, Seed, SeedLog, Tip, Usage
from app.backends.catalog import Catalog, LiveSession
from app.backends.errors import IdempotencyKeyTaken, StaleHead
from app.backends.observer import NO_STORAGE_OBSERVER, StorageObserver
from app.backends.usage import catalog_log_bytes, catalog_usage
from app.domain.errors import SessionAlreadyExists
from app.domain.listing import DEFAULT_QUERY, ListQuery, OrderKey
from app.domain.log import SessionLog, StagedEvents
from app.domain.session import Session, SessionHeader, SessionKey

__all__ = ["IdempotencyRecords", "MemoryBackend", "live_prefix"]

CHUNK_BYTES = 4 * 1024 * 1024


def live_prefix(catalog: Catalog, seed: Seed) -> SessionLog:
    """The events a new session starts with: the seed's, or the source's first ``count`` (shared, not copied) and
    the fork's own events after them."""
    if isinstance(seed, SeedLog):
        return seed.log
    source = catalog.get(seed.source)
    if source is None or source.header.instance != seed.instance:
        raise StaleHead(f'session "{seed.source.id}" is no longer the incarnation the fork was checked against')
    log = source.log.prefix(seed.count)
    if seed.then:  # checked as an append to the seed (EventRejected makes nothing); the log is not live yet
        breaks = dict(seed.breaks) if seed.breaks else None
        log.commit(log.stage(seed.then, appended=True, now=seed.now, breaks=breaks))
    return log


async def log_chunks(log: SessionLog) -> AsyncIterator[bytes]:
    """A log's JSONL lines, a piece at a time."""
    for piece in log.line_chunks(CHUNK_BYTES):
        yield piece


class IdempotencyRecords:
    """Idempotency records by (tenant, key), in memory."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], IdempotencyRecord] = {}

    def get(self, tenant: str, key: str) -> IdempotencyRecord | None:
        return self._records.get((tenant, key))

    def check_free(self, records: Iterable[IdempotencyRecord]) -> None:
        """IdempotencyKeyTaken if any of ``records``' keys is kept already (then none of them may be kept)."""
        for record in records:
            if (record.tenant, record.key) in self._records:
                raise IdempotencyKeyTaken(f"the Idempotency-Key {record.key!r} was used already")

    def add(self, records: Iterable[IdempotencyRecord]) -> None:
        for record in records:
            self._records[(record.tenant, record.key)] = record

    def forget(self, before: int) -> None:
        for slot in [slot for slot, record in self._records.items() if record.created_at < before]:
            del self._records[slot]

    def __iter__(self) -> Iterator[IdempotencyRecord]:
        return iter(list(self._records.values()))


class MemoryBackend:
    name = "memory"

    def __init__(self, clock: Callable[[], int]) -> None:
        self.catalog = Catalog(clock)
        self.remembered = IdempotencyRecords()
        self.observer: StorageObserver = NO_STORAGE_OBSERVER  # nothing here is durable: never told of anything

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def readiness(self) -> Readiness:
        return Readiness(len(self.catalog))

    def listen(self, listener: ChangeListener) -> None:
        return None  # no other process shares this memory

    # -- reads -----------------------------------------------------------------------------------------------------

    async def find(self, key: SessionKey) -> Session | None:
        live = self.catalog.get(key)
        return live.view() if live is not None else None

    async def page(
        self,
        tenant: str,
        *,
        parent: str | None,
        after: OrderKey | None,
        limit: int,
        query: ListQuery = DEFAULT_QUERY,
    ) -> list[Session]:
        found = self.catalog.page(tenant, parent=parent, after=after, limit=limit, query=query)
        return [live.view() for live in found]

    async def read(self, key: SessionKey, start: int, stop: int) -> bytes:
        live = self.catalog.get(key)
        return live.log.lines(start, stop) if live is not None else b""

    def chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]:
        live = self.catalog.get(key)
        if live is None or live.header.instance != instance:
            raise StaleHead(f'session "{key.id}" is no longer the incarnation the snapshot was checked against')
        return log_chunks(live.log.prefix(stop))  # taken now: later appends are not part of it

    async def is_turn_end(self, key: SessionKey, seq: int) -> bool:
        live = self.catalog.get(key)
        return live is not None and live.log.is_turn_end(seq)

    async def history(self, key: SessionKey, at_seq: int | None) -> list[Any]:
        live = self.catalog.get(key)
        return live.log.history(at_seq) if live is not None else []

    async def tip(self, key: SessionKey, wanted: Iterable[int] = (), *, refresh: bool = False) -> Tip | None:
        live = self.catalog.get(key)
        return Tip(live.view(), live.log) if live is not None else None

    # -- changes ---------------------------------------------------------------------------------------------------

    async def create(
        self, key: SessionKey, instance: str, lineage: Mapping[str, Any], seed: Seed, remember: Remember | None = None
    ) -> Session:
        if self.catalog.get(key) is not None:
            raise SessionAlreadyExists(key.id)
        log = live_prefix(self.catalog, seed)
        live = LiveSession(key, self.catalog.new_header(key, instance, lineage), log)
        records = [remember(live.view())] if remember is not None else []
        self.remembered.check_free(records)
        self.catalog.add(live)
        self.remembered.add(records)
        return live.view()

    async def append(self, key: SessionKey, staged: StagedEvents, remember: Sequence[IdempotencyRecord] = ()) -> None:
        live = self.catalog.get(key)
        if live is None:
            raise StaleHead(f'session "{key.id}" is no longer live')
        if staged.base_count != len(live.log):
            raise StaleHead(f'session "{key.id}" has {len(live.log)} events, not the {staged.base_count} staged on')
        self.remembered.check_free(remember)
        live.log.commit(staged)
        self.catalog.touch(live)
        self.remembered.add(remember)

    async def delete(self, key: SessionKey) -> None:
        self.catalog.remove(key)

    async def restore(self, key: SessionKey, header: SessionHeader, log: SessionLog) -> Session:
        if self.catalog.get(key) is not None:
            raise SessionAlreadyExists(key.id)
        live = LiveSession(key, header, log)
        self.catalog.add(live)
        return live.view()

    async def tenants(self) -> list[str]:
        return self.catalog.tenants()

    async def recall(self, tenant: str, idempotency_key: str) -> IdempotencyRecord | None:
        return self.remembered.get(tenant, idempotency_key)

    async def forget(self, before: int) -> None:
        self.remembered.forget(before)

    # -- usage (spec 14: the service counts quotas from it) ---------------------------------------------------------

    def usage(self, tenant: str) -> Usage:
        return catalog_usage(self.catalog, tenant)

    def log_bytes(self, key: SessionKey, count: int) -> int:
        return catalog_log_bytes(self.catalog, key, count)
