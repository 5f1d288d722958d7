"""Index files (spec 4 "Recovery", made fast): a clean shutdown indexes every session, and the next start resumes
each indexed prefix instead of checking it again, but only while the file still holds exactly those bytes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.persistence import recovery
from tests.persistence import builders as b
from tests.persistence.conftest import OpenStore, session_file


def checked_lines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of lines each window of a start checked (recorded as they are checked)."""
    counted: list[int] = []
    window_events = recovery._window_events

    def counting(lines: list[bytes], line_no: int, first_seq: int) -> list[Any]:
        counted.append(len(lines))
        return window_events(lines, line_no, first_seq)

    monkeypatch.setattr(recovery, "_window_events", counting)
    return counted


def test_a_clean_restart_resumes_without_checking_again(
    data_dir: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 3), {"cwd": "/w"})
        await store.append("s", b.open_turn(4))
        before = (store.get("s").log.lines(), store.get("s").view(), store.get("s").log.history())
        store.close()
        assert (data_dir / "index" / "s.idx").is_file()

        counted = checked_lines(monkeypatch)
        again = await open_store(data_dir)
        assert counted == []  # nothing left to check
        session = again.get("s")
        assert (session.log.lines(), session.view(), session.log.history()) == before
        # The open turn goes on, and closes, exactly as it would have.
        await again.append("s", b.close_turn(4))
        assert again.get("s").view().forkable

    asyncio.run(scenario())


def test_lines_written_after_the_index_are_checked(
    data_dir: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 2), None)
        store.close()  # the index covers turns 1-2
        store = await open_store(data_dir)
        await store.append("s", b.full_turn(3))
        expected = store.get("s").log.lines()
        appended = len(b.full_turn(3))
        store.journal.close()  # a crash: no clean shutdown, so the index stays behind the file

        counted = checked_lines(monkeypatch)
        again = await open_store(data_dir)
        assert sum(counted) == appended
        assert again.get("s").log.lines() == expected

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("old", "new", "corrupt"),
    [
        (
            b'"text":"hello (turn 2)"',
            b'"text":"jello (turn 2)"',
            False,
        ),  # still valid: served with what the file now says
        (b'{"turn":2}', b'{"turn":9}', True),  # breaks the turn numbering: corrupt, index or not
    ],
)
def test_a_file_changed_under_its_index_is_checked_whole(
    data_dir: Path, open_store: OpenStore, old: bytes, new: bytes, corrupt: bool
) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 3), None)
        store.close()
        path = session_file(data_dir, "s")
        data = path.read_bytes()
        assert old in data
        path.write_bytes(data.replace(old, new, 1))

        again = await open_store(data_dir)
        if corrupt:
            assert [item.id for item in again.corrupt] == ["s"]
        else:
            assert again.corrupt == []
            assert new in again.get("s").log.lines()

    asyncio.run(scenario())


def test_an_unusable_index_is_ignored_and_a_deleted_sessions_index_removed(
    data_dir: Path, open_store: OpenStore
) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 2), None)
        await store.create("gone", b.turns(1, 1), None)
        store.close()
        index = data_dir / "index"
        (index / "s.idx").write_bytes(b"not an index\n")
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert len(store.get("s").log) == len(b.turns(1, 2))
        await store.delete("gone")
        store.close()
        again = await open_store(data_dir)
        assert sorted(path.name for path in index.iterdir()) == ["s.idx"]
        assert len(again.get("s").log) == len(b.turns(1, 2))

    asyncio.run(scenario())
