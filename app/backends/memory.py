"""The in-memory backend: every session lives in this process's memory and nowhere else.

It really stores (everything the contract promises within one process's life holds), so the service can run on it
for tests and trials (``FORKLOG_BACKEND=memory``); a restart starts empty.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from app.backends.base import Capabilities, ChangeListener, IdempotencyRecord, Readiness, Remember, Seed
from app.backends.catalog import Catalog, LiveSession
from app.backends.catalog_reads import CatalogReads, readiness_of, starting_log
from app.backends.errors import IdempotencyKeyTaken
from app.backends.observer import NO_STORAGE_OBSERVER, StorageObserver
from app.domain.errors import SessionAlreadyExists
from app.domain.log import SessionLog
from app.domain.session import Session, SessionHeader, SessionKey
from app.domain.staging import StagedEvents

__all__ = ["IdempotencyRecords", "MemoryBackend"]


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


class MemoryBackend(CatalogReads):
    name = "memory"

    def __init__(self, clock: Callable[[], int]) -> None:
        self.catalog = Catalog(clock)
        self.remembered = IdempotencyRecords()
        self.observer: StorageObserver = NO_STORAGE_OBSERVER  # nothing here is durable: never told of anything

    @functools.cached_property  # one object for the life of the backend, looked at on every fork and delete
    def capabilities(self) -> Capabilities:
        return Capabilities(counts_locally=self)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def readiness(self, tenant: str | None = None) -> Readiness:
        return readiness_of(self.catalog, (), tenant)

    def listen(self, listener: ChangeListener) -> None:
        return None  # no other process shares this memory

    # -- changes ---------------------------------------------------------------------------------------------------

    async def create(
        self, key: SessionKey, instance: str, lineage: Mapping[str, Any], seed: Seed, remember: Remember | None = None
    ) -> Session:
        log = starting_log(self.catalog, key, seed)
        live = LiveSession(key, self.catalog.new_header(key, instance, lineage), log, changed_at=self.catalog.now())
        records = [remember(live.view())] if remember is not None else []
        self.remembered.check_free(records)
        self.catalog.add(live)
        self.remembered.add(records)
        return live.view()

    async def append(self, key: SessionKey, staged: StagedEvents, remember: Sequence[IdempotencyRecord] = ()) -> None:
        live = self.catalog.staged_on(key, staged.base_count)
        self.remembered.check_free(remember)
        live.log.commit(staged)
        self.catalog.touch(live)
        self.remembered.add(remember)

    async def delete(self, key: SessionKey) -> None:
        self.catalog.remove(key)

    async def restore(self, key: SessionKey, header: SessionHeader, log: SessionLog) -> Session:
        if self.catalog.get(key) is not None:
            raise SessionAlreadyExists(key.id)
        live = LiveSession(key, header, log, changed_at=self.catalog.now())
        self.catalog.add(live)
        return live.view()

    async def set_archived(
        self, key: SessionKey, instance: str, archived: bool, expected_count: int | None = None
    ) -> Session | None:
        live = self.catalog.incarnation(key, instance, expected_count)
        if live is None:
            return None
        self.catalog.set_archived(live, archived)
        return live.view()

    async def recall(self, tenant: str, idempotency_key: str) -> IdempotencyRecord | None:
        return self.remembered.get(tenant, idempotency_key)

    async def forget(self, before: int) -> None:
        self.remembered.forget(before)
