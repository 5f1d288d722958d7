"""The stores the commands read from (``export``, ``copy``'s source), opened so that nothing of them changes.

A data directory is read by :class:`~app.backends.files.reader.FileReader` (no lock taken, no folder made, nothing
repaired or checkpointed; refused while a service owns it, and when it does not exist or holds no forklog store).
A ``postgresql://`` URL is the PostgreSQL backend, which fails at once when the database cannot be reached.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Protocol

from app.api.settings import Settings
from app.backends.files.reader import FileReader
from app.backends.postgres import PostgresBackend, redact
from app.domain.session import Session, SessionKey
from app.service.sessions import wall_clock_ms

__all__ = ["ReadableStore", "describe", "readable_store", "store_of_settings"]


class ReadableStore(Protocol):
    """What a command reads: the reading half of :class:`~app.backends.base.Backend`."""

    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def tenants(self) -> list[str]: ...

    async def find(self, key: SessionKey) -> Session | None: ...

    async def page(
        self, tenant: str, *, parent: str | None, after: tuple[int, str] | None, limit: int
    ) -> list[Session]: ...

    async def read(self, key: SessionKey, start: int, stop: int) -> bytes: ...

    def chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]: ...


def describe(place: str) -> str:
    """``place`` as a message may show it (a URL without its password)."""
    return redact(place) if "://" in place else place


def readable_store(place: str) -> ReadableStore:
    """The store at ``place`` (a data directory or a ``postgresql://`` URL), not opened yet; a data directory that
    does not exist or holds no forklog store is refused here (:class:`~app.backends.files.reader.NoStore`)."""
    if place.startswith("postgresql://"):
        return PostgresBackend(place, clock=wall_clock_ms, wait=False)
    return FileReader(Path(place), clock=wall_clock_ms)


def store_of_settings(settings: Settings) -> ReadableStore:
    """The store the settings name (``--database-url``, else ``--data-dir``)."""
    if settings.database_url is not None:
        return readable_store(settings.database_url.get_secret_value())
    return FileReader(settings.data_dir, clock=wall_clock_ms)
