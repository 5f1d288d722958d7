"""Forks on files: a child's file is its header and its seed's bytes, copied in the kernel from its source's file
(``copy_file_range``) when that file holds them as they are, written from memory otherwise; either way the child
is its own session, and its memory shares the seed with its source instead of copying it."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.backends.files.disk.fileops import FileOps
from tests.backends.files import builders as b
from tests.backends.files.conftest import OpenStore, observe, session_file
from tests.backends.files.faulty_ops import FaultyFileOps
from tests.backends.files.test_files import packed_row

TURN = len(b.full_turn(1))


def count_copies(ops: FaultyFileOps) -> list[int]:
    """Make ``ops`` count the bytes each copy_file_range call copies."""
    copied: list[int] = []

    def copy(source: int, target: int, count: int, offset: int) -> int:
        done = FileOps.copy_file_range(ops, source, target, count, offset)
        copied.append(done)
        return done

    ops.fault("copy_file_range", copy)
    return copied


def child_file_matches(data_dir: Path, store: Any, child_id: str) -> None:
    data = session_file(data_dir, child_id).read_bytes()
    header, body = data.split(b"\n", 1)
    assert orjson.loads(header)["parentSession"] == "source"
    assert body == store.get(child_id).log.lines()


def test_a_fork_copies_its_seed_from_the_source_file(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("source", b.turns(1, 3), None)
        await store.append("source", b.open_turn(4))  # the source goes on: the fork takes turns 1-3
        copied = count_copies(fake_os)
        await store.fork("source", child_id="child", at_seq=3 * TURN - 1)
        assert sum(copied) == len(store.get("source").log.lines(0, 3 * TURN))
        child_file_matches(data_dir, store, "child")
        await store.append("child", b.full_turn(4, "child"))
        await store.append("source", b.close_turn(4))
        expected = {session_id: observe(store, session_id) for session_id in ("source", "child")}
        await store.close()
        again = await open_store(data_dir)
        assert {session_id: observe(again, session_id) for session_id in ("source", "child")} == expected

    asyncio.run(scenario())


@pytest.mark.parametrize("failure", ["no-copy-file-range", "source-file-gone", "source-shorter"])
def test_a_fork_whose_seed_cannot_be_copied_is_written_from_memory(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps, failure: str
) -> None:
    def refuse(*args: Any) -> Any:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("source", b.turns(1, 2), None)
        if failure == "no-copy-file-range":
            fake_os.fault("copy_file_range", refuse)
        elif failure == "source-file-gone":
            os.rename(session_file(data_dir, "source"), data_dir / "elsewhere")
        else:
            path = session_file(data_dir, "source")
            path.write_bytes(path.read_bytes()[:-100])
        made = await store.fork("source", child_id="child")
        assert made.head.count == 2 * TURN
        child_file_matches(data_dir, store, "child")
        assert list((data_dir / "tmp").iterdir()) == []

    asyncio.run(scenario())


def test_a_fork_of_a_log_with_packed_rows_is_written_from_memory(data_dir: Path, open_store: OpenStore) -> None:
    async def first_life() -> None:
        store = await open_store(data_dir)
        await store.create("source", b.full_turn(1), None)
        await store.close()

    asyncio.run(first_life())
    path = session_file(data_dir, "source")
    header, *lines = path.read_bytes().split(b"\n")[:-1]
    chunks = [orjson.loads(line) for line in lines[3:6]]
    time0 = chunks[0]["time"]
    gaps = [chunks[1]["time"] - time0, chunks[2]["time"] - chunks[1]["time"]]
    texts = [chunk["data"]["chunk"]["text"] for chunk in chunks]
    row = packed_row("text-chunks", 3, time0, turn=1, step=1, index=0, dt=gaps, texts=texts)
    path.write_bytes(b"\n".join([header, *lines[:3], row, *lines[6:]]) + b"\n")

    async def second_life() -> None:
        store = await open_store(data_dir)
        assert store.get("source").checkpointed == -1  # its file is not its bytes: never copied, never checkpointed
        await store.fork("source", child_id="child")
        child_file_matches(data_dir, store, "child")
        await store.close()
        again = await open_store(data_dir)
        assert again.backend.recovery.checked == {again.key("source"): TURN}  # checked at every start
        assert again.get("child").log.lines() == again.get("source").log.lines()

    asyncio.run(second_life())


def test_forks_share_the_seed_in_memory(data_dir: Path, open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        seed = b.turns(1, 700)  # over a part's worth of bytes
        await store.create("source", seed, None)
        source = store.get("source").log
        assert source.byte_size > source.seal_bytes
        children = [await store.fork("source", child_id=f"child-{k}") for k in range(3)]
        sealed = [memoryview(piece).obj for piece in source.body_pieces()[:-1]]
        for child in children:
            pieces = store.get(child.id).log.body_pieces()
            assert [memoryview(piece).obj for piece in pieces[: len(sealed)]] == sealed  # the very same bytes
            assert store.get(child.id).log.lines() == source.lines()

    asyncio.run(scenario())
