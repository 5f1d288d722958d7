"""The disk refuses: every failed change is rolled back, nothing is acknowledged, and a retry works.

Faults are injected through the file backend's OS seam (``fake_os``, a :class:`FaultyFileOps`).
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.backends.errors import StorageUnavailable
from app.backends.files.disk.fileops import FileOps
from app.domain.errors import ErrorCode, SessionError
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore, OpenStore, observe, session_file
from tests.backends.files.faulty_ops import FaultyFileOps


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def is_dir(fd: int) -> bool:
    return stat.S_ISDIR(os.fstat(fd).st_mode)


def disk_error(code: int = errno.EIO) -> OSError:
    return OSError(code, os.strerror(code))


def write_half_then_enospc(fd: int, data: Any) -> int:
    view = memoryview(data)
    os.write(fd, view[: len(view) // 2])
    raise disk_error(errno.ENOSPC)


def fail(code: int = errno.EIO) -> Callable[..., Any]:
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise disk_error(code)

    return failing


def fsync_failing_for(*, directories: bool) -> Callable[[int], None]:
    """An ``fsync`` that fails on directories (or on files) and works on the other kind."""

    def fsync(fd: int) -> None:
        if is_dir(fd) == directories:
            raise disk_error()
        os.fsync(fd)

    return fsync


# -- append ----------------------------------------------------------------------------------------------------------

APPEND_FAULTS: dict[str, tuple[str, Callable[..., Any]]] = {
    "write-half-then-disk-full": ("write", write_half_then_enospc),
    "write-io-error": ("write", fail()),
    "fdatasync-io-error": ("fdatasync", fail()),
    "open-too-many-files": ("open", fail(errno.EMFILE)),
    "fstat-io-error": ("fstat", fail()),
}


# The writer opens and measures a session file at the first append to it in a life, and keeps it open after.
FAULTS_OF_A_FIRST_APPEND = {"open", "fstat"}


@pytest.mark.parametrize("fault", list(APPEND_FAULTS))
def test_a_failed_append_changes_nothing_and_a_retry_continues(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps, fault: str
) -> None:
    name, faulty = APPEND_FAULTS[fault]
    path = session_file(data_dir, "s")

    async def first_life() -> tuple[bytes, Any]:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        await store.append("s", b.open_turn(2))
        if name in FAULTS_OF_A_FIRST_APPEND:
            await store.close()  # the writer keeps a file it appended to open: only a new life opens it again
            store = await open_store(data_dir)
        before = observe(store, "s")
        on_disk = path.read_bytes()
        fake_os.fault(name, faulty)
        with pytest.raises(StorageUnavailable):
            await store.append("s", b.close_turn(2))
        fake_os.heal(name)
        assert path.read_bytes() == on_disk, "the failed batch left bytes behind"
        assert observe(store, "s") == before, "the failed batch reached the log in memory"
        await store.close()
        return on_disk, before

    on_disk, before = asyncio.run(first_life())

    async def second_life() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert observe(store, "s") == before
        stored, _, view = await store.append("s", b.close_turn(2))
        assert [event["seq"] for event in stored] == [17, 18, 19, 20, 21]
        assert view.head.forkable
        assert path.read_bytes() == on_disk + store.get("s").log.lines(17)

    asyncio.run(second_life())


def test_a_retry_in_the_same_life_gets_the_seqs_the_failed_batch_would_have_had(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.open_turn(1), None)
        fake_os.fault("write", write_half_then_enospc)
        with pytest.raises(StorageUnavailable):
            await store.append("s", b.close_turn(1))
        fake_os.heal("write")
        stored, _, _ = await store.append("s", b.close_turn(1))
        assert [event["seq"] for event in stored] == [6, 7, 8, 9, 10]
        await store.close()
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert [event["seq"] for event in store.get("s").log.events()] == list(range(11))

    asyncio.run(run())


def test_a_failed_append_in_a_batch_fails_alone(data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps) -> None:
    release = threading.Event()
    rounds: list[list[str]] = []  # the files written before each sync round, seen through the OS seam
    written: list[str] = []

    def write(fd: int, data: Any) -> int:
        path = fd_path(fd)
        if path.endswith(".jsonl") and "/sessions/" in path:
            written.append(Path(path).stem)
        if path.endswith("/fails.jsonl"):
            raise disk_error(errno.ENOSPC)
        return os.write(fd, data)

    def end_of_round(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            if written:
                rounds.append(list(written))
                written.clear()
            if fd_path(fd).endswith("/stall.jsonl"):
                release.wait(5)  # hold the round under way (in its thread) so that the next appends share one
            real(fd)

        return sync

    async def run() -> None:
        store = await open_store(data_dir)
        for session_id in ("stall", "fails", "works"):
            await store.create(session_id, b.turns(1, 1), None)
        before = observe(store, "fails")
        fake_os.fault("write", write)
        fake_os.fault("fdatasync", end_of_round(os.fdatasync))
        fake_os.fault("syncfs", end_of_round(FileOps().syncfs))
        stall = asyncio.ensure_future(store.append("stall", b.full_turn(2)))
        await asyncio.sleep(0.05)
        both = asyncio.gather(
            store.append("fails", b.full_turn(2)), store.append("works", b.full_turn(2)), return_exceptions=True
        )
        await asyncio.sleep(0.05)
        assert not release.is_set() and not stall.done()
        release.set()
        failed, worked = await both
        await stall
        assert isinstance(failed, StorageUnavailable)
        assert not isinstance(worked, BaseException)
        assert worked[2].head.count == 22
        assert observe(store, "fails") == before
        for name in ("write", "fdatasync", "syncfs"):
            fake_os.heal(name)
        await store.close()

    asyncio.run(run())
    assert ["fails", "works"] in rounds, rounds

    async def second_life() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert [len(store.get(session_id).log) for session_id in ("stall", "fails", "works")] == [22, 11, 22]

    asyncio.run(second_life())


# -- create and fork -------------------------------------------------------------------------------------------------

CREATE_FAULTS: dict[str, tuple[str, Callable[..., Any]]] = {
    "write-half-then-disk-full": ("write", write_half_then_enospc),
    "file-fsync-io-error": ("fsync", fsync_failing_for(directories=False)),
    "link-io-error": ("link", fail()),
    "directory-fsync-io-error": ("fsync", fsync_failing_for(directories=True)),
}


@pytest.mark.parametrize("operation", ["create", "fork"])
@pytest.mark.parametrize("fault", list(CREATE_FAULTS))
def test_a_failed_create_leaves_no_file_and_frees_the_id(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps, fault: str, operation: str
) -> None:
    name, faulty = CREATE_FAULTS[fault]

    async def make(store: FileStore) -> Any:
        if operation == "create":
            return await store.create("new", b.turns(1, 2), {"cwd": "/work"})
        return await store.fork("source", child_id="new", at_seq=21)

    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("source", b.turns(1, 3), None)
        source = observe(store, "source")
        fake_os.fault(name, faulty)
        with pytest.raises(StorageUnavailable):
            await make(store)
        fake_os.heal(name)
        assert sorted(path.name for path in (data_dir / "sessions").iterdir()) == ["source.jsonl"]
        assert list((data_dir / "tmp").iterdir()) == []
        with pytest.raises(SessionError) as caught:
            store.get("new")
        assert caught.value.code == ErrorCode.SESSION_NOT_FOUND
        assert observe(store, "source") == source
        # the id is free again, in memory and on disk
        made = await make(store)
        assert made.head.count == 22
        lines = store.get("new").log.lines()
        await store.close()
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("new").log.lines() == lines
        assert store.get("new").header.instance == made.header.instance

    asyncio.run(run())


# -- delete ----------------------------------------------------------------------------------------------------------

DELETE_FAULTS: dict[str, tuple[str, Callable[..., Any]]] = {
    "rename-io-error": ("rename", fail()),
    "directory-fsync-io-error": ("fsync", fsync_failing_for(directories=True)),
}


@pytest.mark.parametrize("fault", list(DELETE_FAULTS))
def test_a_failed_delete_keeps_the_session(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps, fault: str
) -> None:
    name, faulty = DELETE_FAULTS[fault]
    path = session_file(data_dir, "kept")

    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("kept", b.turns(1, 1), None)
        on_disk = path.read_bytes()
        fake_os.fault(name, faulty)
        with pytest.raises(StorageUnavailable):
            await store.delete("kept")
        fake_os.heal(name)
        assert path.read_bytes() == on_disk
        stored, _, _ = await store.append("kept", b.full_turn(2))
        assert stored[0]["seq"] == 11
        lines = store.get("kept").log.lines()
        await store.close()
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("kept").log.lines() == lines
        await store.delete("kept")
        assert not path.exists()

    asyncio.run(run())


def test_a_delete_whose_last_unlink_fails_is_still_a_delete(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    # Once the file is renamed out of sessions/ and the folder synced, the delete has happened; the leftover in
    # tmp/ is swept at the next start.
    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("gone", b.turns(1, 1), None)
        fake_os.fault("unlink", fail())
        await store.delete("gone")
        fake_os.heal("unlink")
        with pytest.raises(SessionError) as caught:
            store.get("gone")
        assert caught.value.code == ErrorCode.SESSION_NOT_FOUND
        assert not session_file(data_dir, "gone").exists()
        assert len(list((data_dir / "tmp").iterdir())) == 1
        await store.close()
        store = await open_store(data_dir)
        assert list((data_dir / "tmp").iterdir()) == []
        with pytest.raises(SessionError) as caught:
            store.get("gone")
        assert caught.value.code == ErrorCode.SESSION_NOT_FOUND
        await store.create("gone", None, None)

    asyncio.run(run())


# -- double faults -----------------------------------------------------------------------------------------------------


def test_a_failed_roll_back_is_cut_away_before_the_next_append(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    async def run() -> list[bytes]:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        fake_os.fault("write", write_half_then_enospc)
        fake_os.fault("ftruncate", fail())  # the roll back fails too: half a batch stays in the file
        with pytest.raises(StorageUnavailable):
            await store.append("s", b.full_turn(2))
        fake_os.heal("write")
        fake_os.heal("ftruncate")
        await store.append("s", b.full_turn(2))  # the retry: the leftover bytes are cut before it is written
        lines = store.get("s").log.lines()
        await store.close()
        return [lines]

    (lines,) = asyncio.run(run())

    async def second_life() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("s").log.lines() == lines

    asyncio.run(second_life())


def test_the_writer_survives_an_error_it_did_not_expect(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    closes = {"failed": False}

    def close_once_failing(fd: int) -> None:
        os.close(fd)
        if not closes["failed"]:  # the writer's first close: the deleted session's file it kept open
            closes["failed"] = True
            raise disk_error()

    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        await store.create("gone", b.turns(1, 1), None)
        await store.append("gone", b.full_turn(2))  # the writer keeps its file open ...
        fake_os.fault("close", close_once_failing)
        await store.delete("gone")  # ... and closes it once the file is gone
        await asyncio.wait_for(store.append("s", b.full_turn(2)), 10)
        fake_os.heal("close")
        assert closes["failed"]
        await asyncio.wait_for(store.append("s", b.full_turn(3)), 10)  # and the writer still serves
        assert store.get("s").view().head.count == 3 * len(b.full_turn(1))

    asyncio.run(run())
