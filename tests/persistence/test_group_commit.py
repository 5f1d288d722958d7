"""Concurrent appenders: contiguous seqs, nothing lost, and one writer round (one sync each) for many appends."""

from __future__ import annotations

import asyncio
import errno
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.domain.errors import SessionError
from app.persistence import files
from app.persistence.durable import DurableStore
from tests.persistence import builders as b
from tests.persistence.conftest import OpenStore


def test_fifty_concurrent_appenders_on_one_session_get_contiguous_seqs(data_dir: Path, open_store: OpenStore) -> None:
    appenders = 50

    async def append_pair(store: DurableStore, who: int) -> list[dict[str, Any]]:
        stored, _, _ = await store.append("busy", [b.log_only(f"{who}/first"), b.log_only(f"{who}/second")])
        return stored

    async def run() -> bytes:
        store = await open_store(data_dir)
        await store.create("busy", b.open_turn(1), None)
        answers = await asyncio.gather(*(append_pair(store, who) for who in range(appenders)))
        for who, stored in enumerate(answers):
            # each batch is stored whole and in order, right where its answer says
            assert [event["data"]["note"] for event in stored] == [f"{who}/first", f"{who}/second"]
            assert stored[1]["seq"] == stored[0]["seq"] + 1
        assert sorted(event["seq"] for stored in answers for event in stored) == list(range(6, 6 + 2 * appenders))
        log = store.get("busy").log
        for stored in answers:
            assert log.events(stored[0]["seq"], stored[1]["seq"] + 1) == stored
        notes = [event["data"]["note"] for event in log.events(6)]
        assert Counter(notes) == Counter(f"{who}/{part}" for who in range(appenders) for part in ("first", "second"))
        times = [event["time"] for event in log.events()]
        assert times == sorted(times)
        await store.append("busy", b.close_turn(1))
        store.close()
        return log.lines()

    lines = asyncio.run(run())

    async def after_restart() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("busy").log.lines() == lines
        assert store.get("busy").view().forkable

    asyncio.run(after_restart())


def test_concurrent_appends_on_many_sessions_share_writer_rounds(
    data_dir: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions, rounds = 20, 5
    batch_sizes: list[int] = []
    syncs: Counter[str] = Counter()
    commit = files._GroupCommitter._commit

    current: list[Any] = []

    def counting_commit(self: Any, batch: list[Any]) -> None:
        batch_sizes.append(len(batch))
        current[:] = batch
        commit(self, batch)

    real_syncfs = files.sync_file_system

    def counting_syncfs(fd: int) -> None:
        # one syncfs commits every file the round wrote
        syncs.update(Path(item.path).stem for item in current if item.error is None)
        assert real_syncfs is not None
        real_syncfs(fd)

    def counting_fdatasync(fd: int) -> None:
        syncs[Path(os.readlink(f"/proc/self/fd/{fd}")).stem] += 1
        os.fdatasync(fd)

    class CountingOs:
        fdatasync = staticmethod(counting_fdatasync)

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

    async def worker(store: DurableStore, session_id: str) -> None:
        for turn in range(2, 2 + rounds):
            stored, _, view = await store.append(session_id, b.full_turn(turn))
            assert stored[0]["seq"] == 11 * (turn - 1)
            assert view.event_count == 11 * turn

    async def run() -> dict[str, bytes]:
        store = await open_store(data_dir)
        ids = [f"s{number:02}" for number in range(sessions)]
        for session_id in ids:
            await store.create(session_id, b.turns(1, 1), None)
        monkeypatch.setattr(files._GroupCommitter, "_commit", counting_commit)
        monkeypatch.setattr(files, "os", CountingOs())
        if real_syncfs is not None:
            monkeypatch.setattr(files, "sync_file_system", counting_syncfs)
        await asyncio.gather(*(worker(store, session_id) for session_id in ids))
        monkeypatch.undo()
        lines = {session_id: store.get(session_id).log.lines() for session_id in ids}
        store.close()
        return lines

    lines = asyncio.run(run())
    appends = sessions * rounds
    assert sum(batch_sizes) == appends
    assert len(batch_sizes) < appends, f"every append had a writer round (and a sync round) of its own: {batch_sizes}"
    assert max(batch_sizes) > 1
    # and each acknowledged append was synced: its file once per round it took part in
    assert syncs == Counter({session_id: rounds for session_id in lines})

    async def after_restart() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert {session_id: store.get(session_id).log.lines() for session_id in lines} == lines

    asyncio.run(after_restart())


def test_a_failed_sync_of_a_group_fails_every_append_of_it_and_leaves_the_files_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [tmp_path / f"s{number}.jsonl" for number in range(3)]
    for path in paths:
        path.write_bytes(b'{"type":"session"}\n')
    answers: dict[str, BaseException | None] = {}

    def failing_sync(fd: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(files, "sync_file_system", failing_sync)
    monkeypatch.setattr(os, "fdatasync", failing_sync)
    committer = files._GroupCommitter(sync=True)
    try:

        def answer(name: str) -> Any:
            return lambda error: answers.__setitem__(name, error)

        batch = [files._Append(path, b'{"type":"x"}\n', answer(path.stem)) for path in paths]
        committer._commit(batch)
    finally:
        committer.close()
    assert set(answers) == {"s0", "s1", "s2"}
    assert all(isinstance(error, OSError) for error in answers.values())
    assert all(path.read_bytes() == b'{"type":"session"}\n' for path in paths)


def test_concurrent_appends_on_one_session_share_writes_and_syncs(
    data_dir: Path, open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    appenders = 50
    writes: list[bytes] = []
    real_append = files.FileJournal.append

    async def counting_append(self: files.FileJournal, session_id: str, lines: bytes) -> None:
        writes.append(lines)
        await real_append(self, session_id, lines)

    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("busy", b.open_turn(1), None)
        monkeypatch.setattr(files.FileJournal, "append", counting_append)
        answers = await asyncio.gather(
            *(store.append("busy", [b.log_only(f"note {who}")]) for who in range(appenders)),
            store.append("busy", [b.turn_start(9)]),  # refused (turn 1 is open): it alone, the others go on
            return_exceptions=True,
        )
        monkeypatch.undo()
        refused = answers.pop()
        assert isinstance(refused, Exception) and "turn/start" in str(refused)
        # Every append answered with its own events and the session as it stood right after them ...
        for answer in answers:
            assert not isinstance(answer, BaseException)
            stored, lines, view = answer
            assert view.event_count == stored[-1]["seq"] + 1
            assert lines == b"".join(store.get("busy").log.lines(event["seq"], event["seq"] + 1) for event in stored)
        # ... but the group was written (and synced) far fewer times than there were appends.
        assert len(writes) < appenders / 2, len(writes)
        assert b"".join(writes) == store.get("busy").log.lines(len(b.open_turn(1)))

    asyncio.run(run())


def test_a_delete_is_not_starved_by_a_stream_of_appends(data_dir: Path, open_store: OpenStore) -> None:
    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("busy", None, None)
        sent: list[asyncio.Future[Any]] = []
        deleted = asyncio.Event()

        async def stream() -> None:  # appends keep arriving, each before the previous ones are answered
            while not deleted.is_set() and len(sent) < 20_000:
                sent.append(asyncio.ensure_future(store.append("busy", [b.log_only(f"note {len(sent)}")])))
                await asyncio.sleep(0)

        producer = asyncio.ensure_future(stream())
        await asyncio.sleep(0.05)
        await asyncio.wait_for(store.delete("busy"), 5)  # it gets its turn on the session, between two groups
        assert len(sent) < 20_000, "the delete waited until the appends stopped coming"
        deleted.set()
        await producer
        answers = await asyncio.gather(*sent, return_exceptions=True)
        assert any(not isinstance(answer, BaseException) for answer in answers)
        assert all(isinstance(answer, SessionError) for answer in answers if isinstance(answer, BaseException))
        with pytest.raises(SessionError):
            store.get("busy")

    asyncio.run(run())
