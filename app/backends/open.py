"""Opening the backend a service (or a command that writes) serves from, by its name and plain values."""

from __future__ import annotations

from pathlib import Path

from app.backends.base import Backend
from app.domain.clock import wall_clock_ms

__all__ = ["open_named_backend"]


def open_named_backend(name: str, *, data_dir: Path, database_url: str | None, fsync: bool) -> Backend:
    """The backend ``name`` says (``memory``; PostgreSQL whenever ``database_url`` is given; else the files in
    ``data_dir``); the file backend takes its data directory's lock here (PostgreSQL connects when the service
    starts, and waits for the database)."""
    # (each backend imported only when named: a service starting on files reads them before it imports the rest)
    if name == "memory":
        from app.backends.memory import MemoryBackend

        return MemoryBackend(clock=wall_clock_ms)
    if database_url is not None:
        from app.backends.postgres import PostgresBackend

        return PostgresBackend(database_url, clock=wall_clock_ms)
    from app.backends.files import FileBackend

    return FileBackend(data_dir, clock=wall_clock_ms, sync=fsync)
