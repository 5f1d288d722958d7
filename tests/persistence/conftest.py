"""Fixtures of the persistence tests: a data directory and stores opened on it (closed at teardown).

The DSH fixture logs come from ``tests/conftest.py`` (``dsh_logs_dir``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.persistence.durable import DurableStore
from app.persistence.files import FileJournal
from tests.persistence.faulty_ops import FaultyFileOps

REPO = Path(__file__).resolve().parents[2]

OpenStore = Callable[[Path], Awaitable[DurableStore]]


def session_file(data_dir: Path, session_id: str) -> Path:
    return data_dir / "sessions" / f"{session_id}.jsonl"


def observe(store: DurableStore, session_id: str) -> dict[str, Any]:
    """What a user can observe of one session: its bytes, its Session resource and its history."""
    session = store.get(session_id)
    return {"lines": session.log.lines(), "view": session.view().to_json(), "history": session.log.history()}


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def fake_os() -> FaultyFileOps:
    """The file operations of every store ``open_store`` opens: healthy until a test injects a fault."""
    return FaultyFileOps()


@pytest.fixture
def open_store(fake_os: FaultyFileOps) -> Iterator[OpenStore]:
    """``await open_store(path)``: a recovered DurableStore over a FileJournal (its OS seam is ``fake_os``);
    whatever is still open is closed."""
    opened: list[DurableStore] = []

    async def open_(path: Path) -> DurableStore:
        store = DurableStore(FileJournal(path, ops=fake_os))
        opened.append(store)
        await store.recover()
        return store

    yield open_
    for store in opened:
        store.close()
