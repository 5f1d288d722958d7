"""The read-only opening of a data directory (``verify``, ``export``, ``copy``'s source): it reads what a start
would serve, and never asks the operating system for any change."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.backends.errors import DataDirLocked, SessionCorrupt
from app.backends.files import FileBackend
from app.backends.files.appends.cuts import CUT_SUFFIX, Cut, CutRecords
from app.backends.files.disk.fileops import FileOps
from app.backends.files.reader import FileReader, NoStore
from app.domain.clock import wall_clock_ms
from app.domain.session import SessionKey
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore, session_file

WRITES = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class ReadOnlyOps(FileOps):
    """Fails at any call that would change the disk."""

    def open(self, path: str | Path, flags: int, mode: int = 0o600) -> int:
        if flags & WRITES:
            raise AssertionError(f"opened {path} to change it")
        return super().open(path, flags, mode)

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"asked for a change: {args}")

    mkdir = unlink = rename = replace = rmtree = link = ftruncate = write = pwrite = fsync = fdatasync = _refuse


def key(session_id: str) -> SessionKey:
    return SessionKey("default", session_id)


def make(data_dir: Path) -> dict[str, bytes]:
    """Sessions as a crash leaves them: one with refused bytes after a cut record, one with a torn tail, a forked
    child whose turn is open, a leftover in tmp/; each session's lines as a start serves them."""

    async def fill() -> None:
        store = await FileStore(data_dir, sync=False).open()
        await store.create("cut", b.turns(1, 1), None)
        await store.create("torn", b.turns(1, 1), None)
        await store.fork("cut", child_id="child")
        await store.append("child", b.open_turn(2))
        await store.close()

    asyncio.run(fill())
    served = {name: session_file(data_dir, name).read_bytes().split(b"\n", 1)[1] for name in ("cut", "torn", "child")}
    cut = session_file(data_dir, "cut")
    size = cut.stat().st_size
    instance = str(orjson.loads(cut.read_bytes().split(b"\n", 1)[0])["instance"])
    with cut.open("ab") as refused:
        refused.write(b'{"type":"forklog-test/note","seq":4,"time":1,"data":{}}\n')
    CutRecords(FileOps(), sync=False).write(Cut(instance, size, data_dir / "index" / f"cut{CUT_SUFFIX}"))
    with session_file(data_dir, "torn").open("ab") as torn:
        torn.write(b'{"type":"turn/st')
    (data_dir / "tmp" / "left-over.jsonl").write_bytes(b"{")
    return served


def test_it_serves_what_a_start_would_without_changing_anything(data_dir: Path) -> None:
    served = make(data_dir)

    async def read() -> None:
        reader = FileReader(data_dir, clock=wall_clock_ms, ops=ReadOnlyOps())
        report = reader.verify()
        assert (report.files, len(report.corrupt)) == (3, 0)
        await reader.open()
        assert await reader.tenants() == ["default"]
        for name, lines in served.items():
            session = await reader.find(key(name))
            assert session is not None
            assert await reader.read(key(name), 0, session.head.count) == lines
            pieces = [piece async for piece in reader.chunks(key(name), session.header.instance, session.head.count)]
            assert b"".join(pieces) == lines  # the child's last event is not a turn/end
        assert await reader.find(key("nobody")) is None
        await reader.close()

    asyncio.run(read())
    assert (data_dir / "tmp" / "left-over.jsonl").exists() and (data_dir / "index" / f"cut{CUT_SUFFIX}").exists()


def test_a_damaged_session_is_kept_out_and_salvaged(data_dir: Path) -> None:
    make(data_dir)
    damaged = session_file(data_dir, "torn")
    lines = damaged.read_bytes().split(b"\n")
    damaged.write_bytes(b"\n".join([*lines[:3], b"not json", *lines[3:]]))

    async def read() -> None:
        reader = FileReader(data_dir, clock=wall_clock_ms, ops=ReadOnlyOps())
        await reader.open()
        with pytest.raises(SessionCorrupt):
            await reader.find(key("torn"))
        assert [entry.id for entry in reader.corrupt] == ["torn"]
        _, log, reason = reader.salvage(key("torn"))
        assert len(log) == 2 and reason is not None and "line 4" in reason

    asyncio.run(read())


def test_it_refuses_what_holds_no_store_and_a_directory_a_service_owns(tmp_path: Path) -> None:
    with pytest.raises(NoStore, match="there is no data directory at"):
        FileReader(tmp_path / "missing", clock=wall_clock_ms)
    (tmp_path / "empty").mkdir()
    with pytest.raises(NoStore, match="holds no forklog store"):
        FileReader(tmp_path / "empty", clock=wall_clock_ms)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(NoStore, match="not a data directory"):
        FileReader(tmp_path / "file", clock=wall_clock_ms)
    assert not (tmp_path / "missing").exists() and list((tmp_path / "empty").iterdir()) == []

    owned = tmp_path / "owned"
    service = FileBackend(owned, clock=wall_clock_ms, sync=False, compression="none")
    try:
        reader = FileReader(owned, clock=wall_clock_ms)
        reader.verify()  # verify may run beside a service
        with pytest.raises(DataDirLocked, match=f"the data directory {owned} is in use by another forklog process"):
            asyncio.run(reader.open())
    finally:
        asyncio.run(service.close())
