"""The one way to open a store: for a service, for a command that changes it, or for a command that only reads it.

Outside the backends themselves, this is the only module that names them (import-linter holds ``app.cli``,
``app.api``, ``app.service`` and ``app.domain`` to it); everything else sees the seam, :mod:`app.backends.base`.
Each backend is imported only when it is opened: a service starting on files reads them before it imports the rest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

from app.backends.base import Backend, DataDirChecks, Reader, Salvaged, Verification
from app.backends.errors import NothingToSalvage, StartRefused
from app.domain.clock import wall_clock_ms
from app.domain.session import SessionKey

if TYPE_CHECKING:
    from app.backends.files.reader import FileReader

__all__ = ["OpenFor", "ReadOnlyStore", "StoreSettings", "open_store", "start_refusal"]


class OpenFor(Enum):
    """What a store is opened for: it decides how an unreachable database is met and what may change."""

    SERVE = "serve"  # a service: it waits for a database that cannot be reached, and sweeps deleted rows
    WRITE = "write"  # a command that changes the store: as a service, but an unreachable database fails it at once
    READ = "read"  # a command that reads: nothing changes (no lock, folder, repair, checkpoint or sweep)


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """Which store: the data directory ``place`` names, or the PostgreSQL database its ``postgresql://`` URL names
    (a ``str``); with ``memory``, a service's memory instead (nothing kept). A data directory syncs each change to
    disk before it is answered, unless ``fsync`` is off. ``compression`` is the encoding a data directory is asked
    to hold (spec 16: ``zstd`` or ``none``); None takes the directory's own (``zstd`` for a new one). ``direct_url``
    names the same database without the connection pooler that ``place`` may name, for what needs a session of its
    own (spec 6); ``pool_size`` is how many connections to the database a process keeps at most. A database's reads
    may be served by the hot standbys that ``read_place`` names (a ``postgresql://`` URL), once they replay within
    ``read_lag_max`` seconds."""

    place: Path | str
    memory: bool = False
    fsync: bool = True
    compression: str | None = None
    direct_url: str | None = None
    pool_size: int = 10
    read_place: str | None = None
    read_lag_max: float = 1.0

    @classmethod
    def at(cls, place: str) -> StoreSettings:
        """The store at ``place`` as a command names it: a ``postgresql://`` URL, else a data directory."""
        return cls(place if place.startswith("postgresql://") else Path(place))


@dataclass(frozen=True, slots=True)
class ReadOnlyStore:
    """A store opened to be read, and what only a data directory does besides (``data_dir``, else None)."""

    reader: Reader
    data_dir: DataDirChecks | None


@overload
def open_store(store: StoreSettings, use: Literal[OpenFor.SERVE, OpenFor.WRITE]) -> Backend: ...


@overload
def open_store(store: StoreSettings, use: Literal[OpenFor.READ], *, every_event: bool = False) -> ReadOnlyStore: ...


def open_store(store: StoreSettings, use: OpenFor, *, every_event: bool = False) -> Backend | ReadOnlyStore:
    """The store ``store`` names, not opened yet, as ``use`` needs it.

    A data directory to change is locked here (and made if it is missing); one to read is refused here when it does
    not exist or holds no forklog store (:class:`~app.backends.errors.StartRefused`), and is read with every event
    checked against every rule with ``every_event`` (else a checkpointed prefix is resumed, as a start does).
    """
    if use is OpenFor.READ:
        return _reader(store, every_event=every_event)
    if store.memory:
        from app.backends.memory import MemoryBackend

        return MemoryBackend(clock=wall_clock_ms)
    if isinstance(store.place, str):
        from app.backends.postgres import PoolSettings, PostgresBackend

        return PostgresBackend(
            store.place,
            clock=wall_clock_ms,
            wait=use is OpenFor.SERVE,
            direct_url=store.direct_url,
            pool=PoolSettings(max_size=store.pool_size),
            read_url=store.read_place,
            read_lag_max=store.read_lag_max,
        )
    from app.backends.files import FileBackend

    return FileBackend(store.place, clock=wall_clock_ms, sync=store.fsync, compression=store.compression)


def _reader(store: StoreSettings, *, every_event: bool) -> ReadOnlyStore:
    # (memory holds nothing another process could read: a command reads the database, else the data directory)
    if isinstance(store.place, str):
        from app.backends.postgres import PostgresBackend

        # A sweep would reclaim deleted sessions' rows: a command that reads leaves them to the service.
        database = PostgresBackend(store.place, clock=wall_clock_ms, wait=False, sweep_interval=math.inf)
        return ReadOnlyStore(database, None)
    from app.backends.files.reader import FileReader

    reader = FileReader(store.place, clock=wall_clock_ms, checkpoints=not every_event)
    return ReadOnlyStore(reader, _FileChecks(reader))


def start_refusal(store: StoreSettings) -> StartRefused | None:
    """Why a service must not start on ``store`` (a reachable database whose schema is newer than this forklog's,
    or a connection pooler in front of it that would break a rule), or None. A database that cannot be reached now
    is no reason: the service starts and waits for it."""
    if not isinstance(store.place, str):
        return None
    from app.backends.postgres import refusal_of  # (the driver, imported only for a database)

    return refusal_of(store.place, direct_url=store.direct_url)


class _FileChecks:
    """A data directory's checks, as :class:`~app.backends.files.reader.FileReader` does them, with a salvage's
    failures said in the seam's words (the file backend's own errors stay inside it)."""

    def __init__(self, reader: FileReader) -> None:
        self._reader = reader

    def count_files(self) -> int:
        return self._reader.count_files()

    def verify(self, progress: Callable[[int], None] | None = None) -> Verification:
        return self._reader.verify(progress)

    def salvage(self, key: SessionKey) -> Salvaged:
        from app.backends.files.start.log_check import CorruptLog

        path = self._reader.log_path(key)
        try:
            header, log, left_out = self._reader.salvage(key)
        except CorruptLog as exc:
            raise NothingToSalvage(f"nothing to salvage from {path}: {exc.reason}") from None
        except OSError as exc:
            raise NothingToSalvage(f"cannot read {path}: {exc.strerror}") from None
        return Salvaged(header, log, left_out)
