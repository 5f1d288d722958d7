"""The file backend's archive journal (spec 17): which sessions are archived, kept in ``index/archived.jsonl``
beside their logs, durable before the answer, folded at start, and never resurrected after a refused write."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.backends.base import SeedLog
from app.backends.errors import StorageUnavailable
from app.backends.files import FileBackend
from app.backends.files.reader import FileReader
from app.domain.clock import wall_clock_ms
from app.domain.ids import new_instance
from app.domain.listing import ListQuery, PageRequest
from app.domain.log import seed_log
from app.domain.session import SessionKey
from tests.backends.files import builders as b
from tests.backends.files.faulty_ops import FaultyFileOps

A, B, OTHER = SessionKey("default", "a"), SessionKey("default", "b"), SessionKey("acme", "a")


def journal(data_dir: Path) -> list[dict[str, Any]]:
    path = data_dir / "index" / "archived.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


async def opened(data_dir: Path, ops: FaultyFileOps | None = None) -> FileBackend:
    backend = FileBackend(
        data_dir, clock=wall_clock_ms, sync=True, ops=ops, checkpoint_interval=None, compression="none"
    )
    await backend.open()
    return backend


async def made(backend: FileBackend, *keys: SessionKey) -> dict[SessionKey, str]:
    instances = {}
    for key in keys:
        session = await backend.create(key, new_instance(), {}, SeedLog(seed_log(b.full_turn(1), now=1)))
        instances[key] = session.header.instance
    return instances


async def archived_ids(backend: FileBackend, tenant: str = "default") -> list[str]:
    return [session.id for session in await backend.page(tenant, PageRequest(10, query=ListQuery(archived=True)))]


def test_an_archive_is_a_line_of_the_journal_and_no_byte_of_the_session_file(data_dir: Path) -> None:
    async def run() -> None:
        backend = await opened(data_dir)
        instances = await made(backend, A, B, OTHER)
        file_before = (data_dir / "sessions" / "a.jsonl").read_bytes()

        session = await backend.set_archived(A, instances[A], True)
        await backend.set_archived(OTHER, instances[OTHER], True)

        assert session is not None and session.header.archived
        assert (data_dir / "sessions" / "a.jsonl").read_bytes() == file_before
        assert journal(data_dir) == [
            {"tenant": "default", "id": "a", "instance": instances[A], "archived": True},
            {"tenant": "acme", "id": "a", "instance": instances[OTHER], "archived": True},
        ]
        assert await backend.set_archived(A, "another-instance", False) is None  # that incarnation is not live
        assert await backend.set_archived(A, instances[A], False, expected_count=3) is None  # another length
        assert await archived_ids(backend) == ["a"] and await archived_ids(backend, "acme") == ["a"]
        await backend.close()

    asyncio.run(run())


def test_a_start_applies_the_journal_and_folds_it_to_the_archived_live_sessions(data_dir: Path) -> None:
    async def run() -> None:
        backend = await opened(data_dir)
        instances = await made(backend, A, B)
        await backend.set_archived(A, instances[A], True)
        await backend.set_archived(B, instances[B], True)
        await backend.set_archived(B, instances[B], False)
        await backend.close()
        with (data_dir / "index" / "archived.jsonl").open("ab") as torn:
            torn.write(b'{"tenant":"default","id":"b","instance":"')  # a line a crash cut: never acknowledged

        again = await opened(data_dir)

        assert await archived_ids(again) == ["a"]
        found = await again.find(B)
        assert found is not None and not found.header.archived
        assert journal(data_dir) == [{"tenant": "default", "id": "a", "instance": instances[A], "archived": True}]
        await again.set_archived(B, instances[B], True)  # appended after the folded journal, whole
        await again.close()
        third = await opened(data_dir)
        assert await archived_ids(third) == ["a", "b"]
        await third.close()

    asyncio.run(run())


def test_a_delete_removes_the_archive_record_and_a_new_incarnation_is_not_archived(data_dir: Path) -> None:
    async def run() -> None:
        backend = await opened(data_dir)
        instances = await made(backend, A)
        await backend.set_archived(A, instances[A], True)

        await backend.delete(A)
        renewed = await made(backend, A)
        await backend.close()

        assert journal(data_dir)[-1] == {"tenant": "default", "id": "a", "instance": instances[A], "archived": False}
        again = await opened(data_dir)
        found = await again.find(A)
        assert found is not None and found.header.instance == renewed[A] and not found.header.archived
        assert journal(data_dir) == []  # folded: nothing is archived
        await again.close()

    asyncio.run(run())


def test_a_refused_archive_answers_unavailable_and_is_not_there_after_a_restart(data_dir: Path) -> None:
    async def run() -> None:
        ops = FaultyFileOps()
        backend = await opened(data_dir, ops)
        instances = await made(backend, A)

        def refused(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").endswith("archived.jsonl"):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            os.fsync(fd)

        ops.fault("fsync", refused)
        with pytest.raises(StorageUnavailable):
            await backend.set_archived(A, instances[A], True)
        ops.heal("fsync")

        found = await backend.find(A)
        assert found is not None and not found.header.archived
        await backend.close()
        again = await opened(data_dir)
        assert await archived_ids(again) == []
        await again.close()

    asyncio.run(run())


def test_a_reader_of_the_data_directory_sees_what_is_archived(data_dir: Path) -> None:
    async def run() -> None:
        backend = await opened(data_dir)
        instances = await made(backend, A, B)
        await backend.set_archived(B, instances[B], True)
        await backend.close()
        journal_before = (data_dir / "index" / "archived.jsonl").read_bytes()

        reader = FileReader(data_dir, clock=wall_clock_ms)
        await reader.open()

        found = await reader.find(B)
        assert found is not None and found.header.archived
        assert (data_dir / "index" / "archived.jsonl").read_bytes() == journal_before  # read, never written
        await reader.close()

    asyncio.run(run())
