"""Index files (spec 4 "Recovery", made fast): a clean shutdown indexes every session, and the next start resumes
each indexed prefix instead of checking it again, but only while the file still holds exactly those bytes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.backends.files import builders as b
from tests.backends.files.conftest import OpenStore, session_file


def test_a_clean_restart_resumes_without_checking_again(data_dir: Path, open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 3), {"cwd": "/w"})
        await store.append("s", b.open_turn(4))
        before = (store.get("s").log.lines(), store.get("s").view(), store.get("s").log.history())
        await store.close()
        assert (data_dir / "index" / "s.idx").is_file()

        again = await open_store(data_dir)
        assert again.backend.recovery.checked_events == 0  # nothing left to check
        session = again.get("s")
        assert (session.log.lines(), session.view(), session.log.history()) == before
        # The open turn goes on, and closes, exactly as it would have.
        await again.append("s", b.close_turn(4))
        assert again.get("s").view().head.forkable

    asyncio.run(scenario())


def test_lines_written_after_the_index_are_checked(data_dir: Path, open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 2), None)
        await store.close()  # the index covers turns 1-2
        store = await open_store(data_dir)
        await store.append("s", b.full_turn(3))
        expected = store.get("s").log.lines()
        appended = len(b.full_turn(3))
        await store.crash()  # no clean shutdown, so the index stays behind the file

        again = await open_store(data_dir)
        assert again.backend.recovery.checked_events == appended
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
        await store.close()
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
        await store.close()
        index = data_dir / "index"
        (index / "s.idx").write_bytes(b"not an index\n")
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert len(store.get("s").log) == len(b.turns(1, 2))
        await store.delete("gone")
        await store.close()
        again = await open_store(data_dir)
        assert sorted(path.name for path in index.iterdir()) == ["s.idx"]
        assert len(again.get("s").log) == len(b.turns(1, 2))

    asyncio.run(scenario())
