"""The contract suite's backends: one fixture, one id per backend, each opened fresh for a test.

A test asks for ``backend`` (opened) or for ``make_backend`` when it reopens the same store (durable backends only:
``make_backend.durable`` says whether a reopened store keeps what was stored). The file backend runs in both of its
encodings (spec 16): ``file-zstd`` (``.jsonl.zstd``, a new data directory's default) and ``file-none`` (``.jsonl``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.backends.base import Backend
from app.backends.files import FileBackend
from app.backends.memory import MemoryBackend
from app.backends.postgres import PostgresBackend
from app.domain.clock import wall_clock_ms

# "pgbouncer": the PostgreSQL backend through PgBouncer in transaction pooling mode (spec 6, A connection pooler).
BACKENDS = ["file-zstd", "file-none", "memory", "postgres", "pgbouncer"]
DATABASES = {"postgres": "forklog_db", "pgbouncer": "forklog_db_pooled"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class BackendFactory:
    """Opens a backend of one kind on one store (a data directory, or a database for ``postgres``); ``reopen``
    closes it and opens it again. ``clock`` is the backends' clock (epoch ms); a test may stop or turn it back."""

    kind: str
    place: Path
    database_url: str | None = None
    opened: list[Backend] = field(default_factory=list)
    clock: Callable[[], int] = wall_clock_ms

    @property
    def durable(self) -> bool:
        return self.kind != "memory"

    @property
    def files(self) -> bool:
        return self.kind.startswith("file")

    @property
    def compression(self) -> str | None:
        """The file backend's encoding (None for another backend)."""
        return self.kind.partition("-")[2] if self.files else None

    async def open(self) -> Backend:
        backend: Backend
        if self.files:
            backend = FileBackend(self.place, clock=self.clock, sync=False, compression=self.compression)
        elif self.kind in DATABASES:
            assert self.database_url is not None
            backend = PostgresBackend(self.database_url, clock=self.clock)
        else:
            backend = MemoryBackend(clock=self.clock)
        await backend.open()
        self.opened.append(backend)
        return backend

    async def reopen(self, backend: Backend) -> Backend:
        await backend.close()
        self.opened.remove(backend)
        return await self.open()

    async def close_all(self) -> None:
        for backend in self.opened:
            await backend.close()
        self.opened.clear()


@pytest.fixture(params=BACKENDS)
async def make_backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BackendFactory]:
    url = request.getfixturevalue(DATABASES[request.param]) if request.param in DATABASES else None
    factory = BackendFactory(request.param, tmp_path / "store", url)
    try:
        yield factory
    finally:
        await factory.close_all()


@pytest.fixture
async def backend(make_backend: BackendFactory) -> Backend:
    return await make_backend.open()


Opener = Callable[[], Awaitable[Backend]]
