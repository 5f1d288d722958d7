"""Fixtures of the file backend's tests: a data directory, and stores opened on it (closed at teardown).

A store here is the service over a :class:`FileBackend` whose OS seam is ``fake_os``; the DSH fixture logs come from
``tests/conftest.py`` (``dsh_logs_dir``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.api.wire.resources import session_json
from app.backends.base import CorruptEntry
from app.backends.catalog import LiveSession
from app.backends.files import FileBackend, FileOps
from app.domain.clock import wall_clock_ms
from app.domain.errors import ErrorCode, SessionError
from app.domain.listing import PageRequest
from app.domain.session import DEFAULT_TENANT, Session, SessionKey
from app.service.sessions import SessionService
from tests.backends.files.faulty_ops import FaultyFileOps

REPO = Path(__file__).resolve().parents[3]


class FileStore:
    """The service over a file backend, called as the file tests call it (the default tenant)."""

    def __init__(
        self,
        path: Path,
        ops: FileOps | None = None,
        *,
        sync: bool = True,
        checkpoint_interval: float | None = None,
        **options: Any,
    ) -> None:
        # No background checkpoints unless asked: a test writes them when it means to (close, checkpoint()). These
        # tests look at the raw format's files and bytes: the zstd encoding's own are tests/backends/files/zstd/.
        options.setdefault("compression", "none")
        self.backend = FileBackend(
            path, clock=wall_clock_ms, ops=ops, sync=sync, checkpoint_interval=checkpoint_interval, **options
        )
        self.service = SessionService(self.backend)

    @staticmethod
    def key(session_id: str) -> SessionKey:
        return SessionKey(DEFAULT_TENANT, session_id)

    async def open(self) -> FileStore:
        await self.service.start()
        return self

    @property
    def corrupt(self) -> list[CorruptEntry]:
        return self.backend.corrupt

    def get(self, session_id: str) -> LiveSession:
        """The live session in memory; SESSION_NOT_FOUND (or SESSION_CORRUPT) as the service answers."""
        live = self.backend.catalog.get(self.key(session_id))
        if live is None:
            raise SessionError(ErrorCode.SESSION_NOT_FOUND, f'session "{session_id}" not found')
        return live

    def page(self, limit: int = 1000) -> list[LiveSession]:
        return self.backend.catalog.page(DEFAULT_TENANT, PageRequest(limit))

    def __contains__(self, session_id: str) -> bool:
        return self.backend.catalog.get(self.key(session_id)) is not None

    async def create(
        self, session_id: str | None, seed: list[Any] | None, meta: dict[str, Any] | None, **kwargs: Any
    ) -> Session:
        return await self.service.create(DEFAULT_TENANT, session_id, seed, meta, **kwargs)

    async def append(self, session_id: str, events: list[Any], **kwargs: Any) -> tuple[list[Any], bytes, Session]:
        """The answer as (the stored events, their lines, the session right after them)."""
        appended = await self.service.append(self.key(session_id), events, **kwargs)
        return appended.events, appended.lines, appended.session

    async def fork(self, source_id: str, **kwargs: Any) -> Session:
        return await self.service.forks.fork(self.key(source_id), **kwargs)

    async def snapshot_lines(self, source_id: str, **kwargs: Any) -> bytes:
        snapshot = await self.service.forks.snapshot(self.key(source_id), **kwargs)
        return b"".join([chunk async for chunk in snapshot.seed])

    async def delete(self, session_id: str) -> None:
        await self.service.delete(self.key(session_id))

    async def close(self) -> None:
        await self.service.stop()

    async def checkpoint(self) -> None:
        await self.backend.checkpoint()

    async def crash(self) -> None:
        """Let go of the directory as a killed process would: no clean shutdown, no last checkpoints written."""
        self.service.lifecycle = type(self.service.lifecycle).STOPPED
        await self.backend.close(checkpoint=False)


OpenStore = Callable[[Path], Awaitable[FileStore]]


def session_file(data_dir: Path, session_id: str) -> Path:
    return data_dir / "sessions" / f"{session_id}.jsonl"


def observe(store: FileStore, session_id: str) -> dict[str, Any]:
    """What a user can observe of one session: its bytes, its Session resource and its history."""
    session = store.get(session_id)
    return {"lines": session.log.lines(), "view": session_json(session.view()), "history": session.log.history()}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def fake_os() -> FaultyFileOps:
    """The file operations of every store ``open_store`` opens: healthy until a test injects a fault."""
    return FaultyFileOps()


@pytest.fixture
def open_store(fake_os: FaultyFileOps) -> Iterator[OpenStore]:
    """``await open_store(path)``: a recovered store over a FileBackend (its OS seam is ``fake_os``); whatever is
    still open at teardown has its directory released."""
    opened: list[FileStore] = []

    async def open_(path: Path) -> FileStore:
        store = FileStore(path, fake_os)
        opened.append(store)
        return await store.open()

    yield open_
    for store in opened:
        asyncio.run(store.backend.close(checkpoint=False))
