"""The stores the commands open: those they read from (``export``, ``copy``'s source), opened so that nothing of
them changes, and the one ``import`` writes to.

A data directory is read by :class:`~app.backends.files.reader.FileReader` (no lock taken, no folder made, nothing
repaired or checkpointed; refused while a service owns it, and when it does not exist or holds no forklog store).
A ``postgresql://`` URL is the PostgreSQL backend, which fails at once when the database cannot be reached and
never sweeps (a service's sweep reclaims deleted sessions' rows; a command that reads leaves them).
"""

from __future__ import annotations

import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Protocol

from app.api.settings import Settings
from app.backends.base import Backend
from app.backends.errors import StorageError
from app.backends.files.reader import FileReader
from app.backends.open import open_named_backend
from app.backends.postgres import PostgresBackend, redact
from app.domain.clock import wall_clock_ms
from app.domain.listing import PageRequest
from app.domain.session import Session, SessionKey

__all__ = ["ReadableStore", "describe", "readable_store", "store_of_settings", "writable_store_of_settings"]


class ReadableStore(Protocol):
    """What a command reads: the reading half of :class:`~app.backends.base.Backend`."""

    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def tenants(self) -> list[str]: ...

    async def find(self, key: SessionKey) -> Session | None: ...

    async def page(self, tenant: str, request: PageRequest) -> list[Session]: ...

    async def read(self, key: SessionKey, start: int, stop: int) -> bytes: ...

    def chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]: ...


def describe(place: str) -> str:
    """``place`` as a message may show it (a URL without its password)."""
    return redact(place) if "://" in place else place


def readable_store(place: str) -> ReadableStore:
    """The store at ``place`` (a data directory or a ``postgresql://`` URL), not opened yet; a data directory that
    does not exist or holds no forklog store is refused here (:class:`~app.backends.files.reader.NoStore`)."""
    if place.startswith("postgresql://"):
        return PostgresBackend(place, clock=wall_clock_ms, wait=False, sweep_interval=math.inf)
    return FileReader(Path(place), clock=wall_clock_ms)


def store_of_settings(settings: Settings) -> ReadableStore:
    """The store the settings name (``--database-url``, else ``--data-dir``)."""
    if settings.database_url is not None:
        return readable_store(settings.database_url.get_secret_value())
    return FileReader(settings.data_dir, clock=wall_clock_ms)


def writable_store_of_settings(settings: Settings) -> Backend:
    """The backend the settings name, as the service opens it, except that a database that cannot be reached fails
    at once (a command does not wait for it as a service does)."""
    if settings.database_url is not None:
        return PostgresBackend(settings.database_url.get_secret_value(), clock=wall_clock_ms, wait=False)
    return open_named_backend(settings.backend, data_dir=settings.data_dir, database_url=None, fsync=settings.fsync)


class Opens(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...


async def on_open_store(command: str, store: Opens, work: Callable[[], Awaitable[int]]) -> int:
    """``work``'s exit status, run on ``store`` opened (and closed after); a storage failure is printed as
    ``forklog COMMAND: ...`` and exits 1."""
    try:
        await store.open()
        return await work()
    except StorageError as exc:
        print(f"forklog {command}: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
