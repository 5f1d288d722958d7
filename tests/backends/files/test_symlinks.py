"""Nothing outside the data directory is ever read, written, renamed or deleted, whatever links are planted in it.

Each test plants a symbolic link that points at a canary folder outside the data directory, runs the service's
storage over it, and checks that the canary's names and bytes are exactly what they were.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from app.backends.errors import StorageUnavailable, UnsafeDataDir
from app.backends.files import FileBackend
from app.domain.clock import wall_clock_ms
from app.domain.errors import ErrorCode, ForklogError
from tests.backends.files import builders as b
from tests.backends.files.conftest import OpenStore, session_file


def fingerprint(folder: Path) -> str:
    """Names, kinds and bytes of everything under ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def canary(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    (folder / "inner").mkdir(parents=True)
    (folder / "secret.jsonl").write_bytes(b'{"type":"session","version":0,"id":"evil","createdAt":1}\n')
    (folder / "inner" / "keep.txt").write_text("keep me")
    return folder


def test_a_symlink_in_sessions_is_corrupt_and_never_followed(
    data_dir: Path, open_store: OpenStore, canary: Path
) -> None:
    (data_dir / "sessions").mkdir(parents=True)
    (data_dir / "sessions" / "evil.jsonl").symlink_to(canary / "secret.jsonl")
    (data_dir / "sessions" / "dir.jsonl").mkdir()
    os.mkfifo(data_dir / "sessions" / "fifo.jsonl")  # opening it would block a start that followed it
    before = fingerprint(canary)

    async def run() -> None:
        store = await open_store(data_dir)
        reasons = {item.id: item.reason for item in store.corrupt}
        assert set(reasons) == {"evil", "dir", "fifo"}
        assert "symbolic link" in reasons["evil"]
        for session_id in ("evil", "dir", "fifo"):
            with pytest.raises(ForklogError) as refused:
                store.get(session_id)
            assert refused.value.code == ErrorCode.SESSION_CORRUPT
            with pytest.raises(ForklogError) as refused:
                await store.create(session_id, None, None)
            assert refused.value.code == ErrorCode.SESSION_CORRUPT

    asyncio.run(run())
    assert fingerprint(canary) == before
    assert (data_dir / "sessions" / "evil.jsonl").is_symlink(), "the planted link itself is left for the operator"


def test_a_link_planted_over_a_live_session_file_is_never_written_through(
    data_dir: Path, open_store: OpenStore, canary: Path
) -> None:
    before = fingerprint(canary)

    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        path = session_file(data_dir, "s")
        path.unlink()
        path.symlink_to(canary / "secret.jsonl")
        with pytest.raises(StorageUnavailable):
            await store.append("s", b.full_turn(2))
        assert len(store.get("s").log) == 11
        await store.delete("s")  # the link is renamed away and removed, its target is not touched
        await store.close()

    asyncio.run(run())
    assert fingerprint(canary) == before


@pytest.mark.parametrize("folder", ["sessions", "tmp", "index"])
def test_a_start_refuses_a_folder_that_is_a_symlink(data_dir: Path, canary: Path, folder: str) -> None:
    data_dir.mkdir()
    (data_dir / folder).symlink_to(canary, target_is_directory=True)
    before = fingerprint(canary)
    with pytest.raises(UnsafeDataDir) as refused:
        FileBackend(data_dir, clock=wall_clock_ms, compression="none")
    assert str(data_dir / folder) in str(refused.value)
    assert "symbolic link" in str(refused.value)
    assert fingerprint(canary) == before


@pytest.mark.parametrize("folder", ["sessions", "tmp", "index"])
def test_a_start_refuses_a_folder_that_is_a_file(data_dir: Path, folder: str) -> None:
    data_dir.mkdir()
    (data_dir / folder).write_text("not a folder")
    with pytest.raises(UnsafeDataDir) as refused:
        FileBackend(data_dir, clock=wall_clock_ms, compression="none")
    assert str(data_dir / folder) in str(refused.value)
    assert (data_dir / folder).read_text() == "not a folder"


def test_a_start_refuses_a_lock_file_that_is_a_symlink(data_dir: Path, canary: Path) -> None:
    data_dir.mkdir()
    (data_dir / "forklog.lock").symlink_to(canary / "secret.jsonl")
    before = fingerprint(canary)
    with pytest.raises(UnsafeDataDir) as refused:
        FileBackend(data_dir, clock=wall_clock_ms, compression="none")
    assert "forklog.lock" in str(refused.value)
    assert fingerprint(canary) == before


def test_links_inside_tmp_and_index_are_removed_and_their_targets_kept(
    data_dir: Path, open_store: OpenStore, canary: Path
) -> None:
    async def first_life() -> bytes:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        lines = store.get("s").log.lines()
        await store.close()
        return lines

    lines = asyncio.run(first_life())
    (data_dir / "tmp" / "leftover").symlink_to(canary, target_is_directory=True)
    (data_dir / "tmp" / "leftover.tmp").symlink_to(canary / "secret.jsonl")
    (data_dir / "index" / "s.cut").symlink_to(canary / "secret.jsonl")
    (data_dir / "index" / "other.idx").symlink_to(canary / "inner", target_is_directory=True)
    before = fingerprint(canary)

    async def second_life() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("s").log.lines() == lines
        await store.close()

    asyncio.run(second_life())
    assert fingerprint(canary) == before
    for leftover in ("tmp/leftover", "tmp/leftover.tmp", "index/other.idx", "index/s.cut"):
        assert not os.path.lexists(data_dir / leftover)
