"""The writer keeps the session files it appended to last open: a file removed or made anew is never written
through a descriptor of the old one, and no more than OPEN_FILES stay open."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from app.backends.files.appends.writer import OPEN_FILES
from tests.backends.files import builders as b
from tests.backends.files.conftest import OpenStore, session_file


def open_session_files(data_dir: Path) -> int:
    """Descriptors of this process on session files, those in sessions/ and those a delete moved to tmp/."""
    folders = tuple(str((data_dir / name).resolve()) + os.sep for name in ("sessions", "tmp"))
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(folders)
    return count


def test_a_session_deleted_and_made_again_gets_its_appends_in_its_new_file(
    data_dir: Path, open_store: OpenStore
) -> None:
    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        await store.append("s", b.full_turn(2))  # the writer now holds the first file open
        await store.delete("s")
        await store.create("s", b.turns(1, 1), None)
        stored, _, _ = await store.append("s", b.full_turn(2))
        assert stored[0]["seq"] == len(b.turns(1, 1))
        assert session_file(data_dir, "s").read_bytes().endswith(store.get("s").log.lines(stored[0]["seq"]))
        await store.close()

        again = await open_store(data_dir)
        assert again.corrupt == []
        assert again.get("s").log.lines() == store.get("s").log.lines()

    asyncio.run(run())


def test_appends_to_more_sessions_than_it_keeps_open_all_land_and_few_files_stay_open(
    data_dir: Path, open_store: OpenStore
) -> None:
    sessions = OPEN_FILES + 40

    async def run() -> None:
        store = await open_store(data_dir)
        for n in range(sessions):
            await store.create(f"s{n}", b.open_turn(1), None)
        for round_ in range(2):  # the second round finds most files closed again, evicted by later ones
            await asyncio.gather(*(store.append(f"s{n}", [b.log_only(f"{round_}")]) for n in range(sessions)))
        assert open_session_files(data_dir) <= OPEN_FILES
        lines = {n: store.get(f"s{n}").log.lines() for n in range(sessions)}
        await store.close()
        assert open_session_files(data_dir) == 0, "a clean stop closes every session file"

        again = await open_store(data_dir)
        assert again.corrupt == []
        for n in range(sessions):
            assert again.get(f"s{n}").log.lines() == lines[n]
            assert again.get(f"s{n}").view().head.count == len(b.open_turn(1)) + 2

    asyncio.run(run())


def test_a_deleted_sessions_file_is_closed_without_waiting_for_another_append(
    data_dir: Path, open_store: OpenStore
) -> None:
    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.open_turn(1), None)
        await store.append("s", [b.log_only("kept open")])
        assert open_session_files(data_dir) == 1
        await store.delete("s")
        deadline = asyncio.get_running_loop().time() + 5
        while open_session_files(data_dir) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert open_session_files(data_dir) == 0, "the deleted file's space is held until some other append"

    asyncio.run(run())
