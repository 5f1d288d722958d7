"""Checkpoints (spec 4 "Recovery", made fast): what was checked stays checked across a clean stop and a crash, so a
start checks only what was appended after the last checkpoint, but only while the file still holds exactly the
checked bytes; anything else (a file changed behind it, a damaged journal) means the whole file is checked."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from app.backends.files.checkpoints.journal import MAGIC, Journal
from app.backends.files.checkpoints.records import read_chains
from app.backends.files.disk.fileops import FileOps
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore, OpenStore, observe, session_file
from tests.backends.files.faulty_ops import FaultyFileOps

TURN = len(b.full_turn(1))


def journal(data_dir: Path) -> Path:
    return data_dir / "index" / "checkpoints"


def test_a_clean_restart_resumes_without_checking_again(data_dir: Path, open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 3), {"cwd": "/w"})
        await store.append("s", b.open_turn(4))
        await store.create("small", b.turns(1, 1), None)
        before = {session_id: observe(store, session_id) for session_id in ("s", "small")}
        await store.close()
        assert journal(data_dir).is_file()
        assert sorted(path.name for path in (data_dir / "index").iterdir()) == ["checkpoints"]

        again = await open_store(data_dir)
        report = again.backend.recovery
        assert (report.checked_events, report.checked, report.events) == (0, {}, 4 * TURN + 6)
        # A small session nothing touches stays frozen; reading it thaws it into the very same log.
        assert again.get("small").frozen
        assert {session_id: observe(again, session_id) for session_id in ("s", "small")} == before
        # The open turn goes on, and closes, exactly as it would have.
        await again.append("s", b.close_turn(4))
        assert again.get("s").view().head.forkable

    asyncio.run(scenario())


def test_only_lines_appended_after_the_last_checkpoint_are_checked_after_a_crash(
    data_dir: Path, open_store: OpenStore
) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 2), None)
        await store.create("quiet", b.turns(1, 2), None)
        await store.checkpoint()
        await store.append("s", b.full_turn(3))
        await store.create("new", b.turns(1, 1), None)
        expected = {session_id: observe(store, session_id) for session_id in ("s", "quiet", "new")}
        await store.crash()  # no last round: the journal is behind the files

        again = await open_store(data_dir)
        report = again.backend.recovery
        assert report.checked == {again.key("s"): TURN, again.key("new"): TURN}
        assert report.checked_events == 2 * TURN
        assert {session_id: observe(again, session_id) for session_id in ("s", "quiet", "new")} == expected
        # What was checked now is checkpointed by the next round: another crash checks nothing.
        await again.checkpoint()
        await again.crash()
        third = await open_store(data_dir)
        assert third.backend.recovery.checked_events == 0
        assert {session_id: observe(third, session_id) for session_id in ("s", "quiet", "new")} == expected

    asyncio.run(scenario())


def test_background_rounds_keep_the_checkpoints_current(data_dir: Path) -> None:
    async def scenario() -> None:
        store = await FileStore(data_dir, checkpoint_interval=0.02).open()
        await store.create("s", b.turns(1, 1), None)
        for turn in range(2, 6):
            await store.append("s", b.full_turn(turn))
        checkpointer = store.backend.checkpointer
        assert checkpointer is not None
        for _ in range(200):
            if store.get("s").checkpointed == 5 * TURN:
                break
            await asyncio.sleep(0.01)
        assert store.get("s").checkpointed == 5 * TURN
        lines = store.get("s").log.lines()
        await store.crash()
        again = await FileStore(data_dir).open()
        assert again.backend.recovery.checked_events == 0
        assert again.get("s").log.lines() == lines
        await again.crash()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("old", "new", "corrupt"),
    [
        (b'"text":"hello (turn 2)"', b'"text":"jello (turn 2)"', False),  # still valid: served as the file now says
        (b'{"turn":2}', b'{"turn":9}', True),  # breaks the turn numbering: corrupt, checkpoint or not
    ],
)
def test_a_file_changed_under_its_checkpoint_is_checked_whole(
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
            assert again.backend.recovery.checked == {again.key("s"): 3 * TURN}
            assert new in again.get("s").log.lines()

    asyncio.run(scenario())


def test_a_file_cut_shorter_than_its_checkpoint_is_checked_whole(data_dir: Path, open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 3), None)
        expected = store.get("s").log.lines(0, 2 * TURN)
        await store.close()
        path = session_file(data_dir, "s")
        header = path.read_bytes().split(b"\n", 1)[0] + b"\n"
        path.write_bytes(header + expected)
        again = await open_store(data_dir)
        assert again.backend.recovery.checked == {again.key("s"): 2 * TURN}
        assert again.get("s").log.lines() == expected

    asyncio.run(scenario())


@pytest.mark.parametrize("damage", ["flip-a-byte", "torn-end", "not-a-journal", "an-older-version", "a-folder"])
def test_a_damaged_journal_is_never_trusted(data_dir: Path, open_store: OpenStore, damage: str) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("a", b.turns(1, 2), None)
        await store.checkpoint()
        await store.create("b", b.turns(1, 1), None)
        expected = {session_id: observe(store, session_id) for session_id in ("a", "b")}
        await store.close()
        path = journal(data_dir)
        data = bytearray(path.read_bytes())
        if damage == "flip-a-byte":  # inside the first record: it and everything after it are never read
            data[60] ^= 0x20
            path.write_bytes(data)
        elif damage == "torn-end":  # the last record cut short, as a crash in the middle of an append leaves it
            path.write_bytes(data[:-5])
        elif damage == "not-a-journal":
            path.write_bytes(b"something else\n" + data)
        elif damage == "an-older-version":  # whole records of v1, whose block digests were SHA-256
            path.write_bytes(b"forklog checkpoints v1\n" + data[len(MAGIC) :])
        else:
            path.unlink()
            path.mkdir()

        again = await open_store(data_dir)
        assert again.corrupt == []
        checked = again.backend.recovery.checked
        if damage == "torn-end":  # the first round's record is whole: "a" is resumed, the torn "b" checked
            assert checked == {again.key("b"): TURN}
        else:
            assert checked == {again.key("a"): 2 * TURN, again.key("b"): TURN}
        assert {session_id: observe(again, session_id) for session_id in ("a", "b")} == expected
        await again.close()  # a leftover folder in its place was removed; the journal is written anew
        third = await open_store(data_dir)
        assert third.backend.recovery.checked_events == 0

    asyncio.run(scenario())


def test_a_new_incarnation_is_never_resumed_from_the_old_ones_checkpoint(data_dir: Path, open_store: OpenStore) -> None:
    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 3), None)
        await store.checkpoint()
        await store.delete("s")
        await store.create("s", b.turns(1, 1), None)
        expected = observe(store, "s")
        await store.crash()
        again = await open_store(data_dir)
        assert again.backend.recovery.checked == {again.key("s"): TURN}
        assert observe(again, "s") == expected

    asyncio.run(scenario())


def test_the_journal_is_rewritten_with_one_record_a_live_session(data_dir: Path) -> None:
    async def scenario() -> None:
        store = await FileStore(data_dir, journal_rewrite_bytes=1).open()
        checkpointer = store.backend.checkpointer
        assert checkpointer is not None
        await store.create("kept", b.turns(1, 1), None)
        await store.create("gone", b.turns(1, 1), None)
        await store.checkpoint()
        await store.delete("gone")
        rewrites = checkpointer.rewrites
        turn = 2
        while checkpointer.rewrites == rewrites:  # the journal grows by a record a round until it is rewritten
            await store.append("kept", b.full_turn(turn))
            await store.checkpoint()
            turn += 1
            assert turn < 50
        chains = read_chains(Journal(journal(data_dir), FileOps(), sync=False).read())
        assert list(chains) == [store.key("kept")]
        assert len(chains[store.key("kept")].records) <= 2  # the merged one, and maybe the round's after it
        expected = observe(store, "kept")
        await store.crash()
        again = await FileStore(data_dir).open()
        assert again.backend.recovery.checked_events == 0
        assert observe(again, "kept") == expected
        await again.crash()

    asyncio.run(scenario())


def test_a_refused_journal_write_changes_nothing_but_the_next_start_s_work(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    def refuse(*args: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async def scenario() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 2), None)
        fake_os.fault("pwrite", refuse)
        await store.checkpoint()  # refused: logged, the session stays dirty
        fake_os.heal("pwrite")
        await store.append("s", b.full_turn(3))  # appends never wait on checkpoints
        expected = observe(store, "s")
        await store.checkpoint()  # tried again, and written
        await store.crash()
        again = await open_store(data_dir)
        assert again.backend.recovery.checked_events == 0
        assert observe(again, "s") == expected

    asyncio.run(scenario())


def test_a_checkpoint_without_the_figures_is_not_trusted_the_log_is_folded_again(
    data_dir: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records a forklog before spec 17 wrote (states and turn/end points without stats) survive a start: the
    sessions they describe are checked and folded from their files instead, with the same figures."""
    from app.domain.log_state import LogState
    from app.domain.staging import Checkpoint
    from tests.events import agent_step, agent_turn, turn_start, user_message

    new_state_columns, new_point_columns = LogState.columns, Checkpoint.columns

    async def scenario() -> None:
        monkeypatch.setattr(LogState, "columns", lambda self: new_state_columns(self)[:13])
        monkeypatch.setattr(Checkpoint, "columns", lambda self: new_point_columns(self)[:3])
        store = await open_store(data_dir)
        await store.create("s", [], {"seedLength": 0})
        await store.append("s", [*agent_turn(1), *agent_turn(2, steps=3)])
        await store.append("s", [turn_start(3), user_message("more"), *agent_step(3, 1, calls=2, answered=1)])
        await store.create("small", b.turns(1, 1), None)
        await store.fork("s", child_id="child", at_seq=store.get("s").view().head.last_turn_end_seq)
        expected = {session_id: store.get(session_id).view().head for session_id in ("s", "small", "child")}
        assert expected["s"].stats.steps == 7 and expected["s"].stats.usage
        await store.close()
        assert journal(data_dir).is_file()
        monkeypatch.setattr(LogState, "columns", new_state_columns)
        monkeypatch.setattr(Checkpoint, "columns", new_point_columns)

        again = await open_store(data_dir)
        report = again.backend.recovery
        assert report.checked_events == report.events  # nothing resumed from the old records
        for session_id, head in expected.items():
            assert again.get(session_id).view().head == head
        assert again.get("s").view().head.stats.columns() == expected["s"].stats.columns()
        # The next records carry the figures: a start after them resumes without checking again.
        await again.close()
        third = await open_store(data_dir)
        assert third.backend.recovery.checked_events == 0
        assert third.get("s").view().head == expected["s"]

    asyncio.run(scenario())
