"""Concurrent appenders: contiguous seqs, nothing lost, and one writer round (one sync each) for many appends."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.backends.errors import StorageUnavailable
from app.backends.files.disk.fileops import FileOps
from app.domain.errors import SessionError
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore, OpenStore, session_file
from tests.backends.files.faulty_ops import FaultyFileOps

DELETE_PATIENCE = 5.0  # seconds: far more than one group's write and sync on a slow CI disk


def test_fifty_concurrent_appenders_on_one_session_get_contiguous_seqs(data_dir: Path, open_store: OpenStore) -> None:
    appenders = 50

    async def append_pair(store: FileStore, who: int) -> list[dict[str, Any]]:
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
        await store.close()
        return log.lines()

    lines = asyncio.run(run())

    async def after_restart() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert store.get("busy").log.lines() == lines
        assert store.get("busy").view().head.forkable

    asyncio.run(after_restart())


class RoundRecorder:
    """Watches the writer through the OS seam: the session files written in each round, and each file's syncs."""

    def __init__(self, ops: FaultyFileOps) -> None:
        self.rounds: list[list[str]] = []
        self.syncs: Counter[str] = Counter()
        self.writes: list[bytes] = []
        self._written: list[str] = []
        self._ops = ops
        real = FileOps()
        ops.fault("write", self._write)
        ops.fault("fdatasync", self._syncing(real.fdatasync, single=True))
        ops.fault("syncfs", self._syncing(real.syncfs, single=False))

    def stop(self) -> None:
        for name in ("write", "fdatasync", "syncfs"):
            self._ops.heal(name)

    @staticmethod
    def _session(fd: int) -> str | None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        return Path(path).stem if "/sessions/" in path and path.endswith(".jsonl") else None

    def _write(self, fd: int, data: Any) -> int:
        session = self._session(fd)
        if session is not None:
            self._written.append(session)
            self.writes.append(bytes(data))
        return os.write(fd, data)

    def _syncing(self, real: Any, *, single: bool) -> Any:
        def sync(fd: int) -> None:
            written, self._written = self._written, []
            if written:
                self.rounds.append(written)
            # one syncfs commits every file the round wrote; an fdatasync only its own
            if single:
                session = self._session(fd)
                if session is not None:
                    self.syncs[session] += 1
            else:
                self.syncs.update(set(written))
            real(fd)

        return sync


def test_concurrent_appends_on_many_sessions_share_writer_rounds(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    sessions, rounds = 20, 5

    async def worker(store: FileStore, session_id: str) -> None:
        for turn in range(2, 2 + rounds):
            stored, _, view = await store.append(session_id, b.full_turn(turn))
            assert stored[0]["seq"] == 11 * (turn - 1)
            assert view.head.count == 11 * turn

    async def run() -> tuple[dict[str, bytes], RoundRecorder]:
        store = await open_store(data_dir)
        ids = [f"s{number:02}" for number in range(sessions)]
        for session_id in ids:
            await store.create(session_id, b.turns(1, 1), None)
        recorder = RoundRecorder(fake_os)
        await asyncio.gather(*(worker(store, session_id) for session_id in ids))
        recorder.stop()
        lines = {session_id: store.get(session_id).log.lines() for session_id in ids}
        await store.close()
        return lines, recorder

    lines, recorder = asyncio.run(run())
    batch_sizes = [len(written) for written in recorder.rounds]
    appends = sessions * rounds
    assert sum(batch_sizes) == appends
    assert len(batch_sizes) < appends, f"every append had a writer round (and a sync round) of its own: {batch_sizes}"
    assert max(batch_sizes) > 1
    # and each acknowledged append was synced: its file once per round it took part in
    assert recorder.syncs == Counter({session_id: rounds for session_id in lines})

    async def after_restart() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        assert {session_id: store.get(session_id).log.lines() for session_id in lines} == lines

    asyncio.run(after_restart())


def test_a_failed_sync_of_a_group_fails_every_append_of_it_and_leaves_the_files_as_they_were(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    release = threading.Event()

    def failing_sync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/stall.jsonl"):
            release.wait(5)  # hold the round under way (in its thread) so that the next appends share one
            os.fdatasync(fd)
            return
        raise OSError(errno.EIO, "I/O error")

    async def run() -> None:
        store = await open_store(data_dir)
        ids = ["s0", "s1", "s2"]
        for session_id in ["stall", *ids]:
            await store.create(session_id, b.turns(1, 1), None)
        before = {session_id: session_file(data_dir, session_id).read_bytes() for session_id in ids}
        fake_os.fault("fdatasync", failing_sync)
        fake_os.fault("syncfs", failing_sync)
        stall = asyncio.ensure_future(store.append("stall", b.full_turn(2)))
        await asyncio.sleep(0.05)
        group = asyncio.gather(
            *(store.append(session_id, b.full_turn(2)) for session_id in ids), return_exceptions=True
        )
        await asyncio.sleep(0.05)
        assert not release.is_set() and not stall.done()
        release.set()
        answers = await group
        await stall
        for name in ("fdatasync", "syncfs"):
            fake_os.heal(name)
        assert all(isinstance(answer, StorageUnavailable) for answer in answers), answers
        assert {session_id: session_file(data_dir, session_id).read_bytes() for session_id in ids} == before
        assert all(len(store.get(session_id).log) == 11 for session_id in ids)
        await store.close()

    asyncio.run(run())


def test_concurrent_appends_on_one_session_share_writes_and_syncs(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    appenders = 50

    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("busy", b.open_turn(1), None)
        recorder = RoundRecorder(fake_os)
        answers = await asyncio.gather(
            *(store.append("busy", [b.log_only(f"note {who}")]) for who in range(appenders)),
            store.append("busy", [b.turn_start(9)]),  # refused (turn 1 is open): it alone, the others go on
            return_exceptions=True,
        )
        recorder.stop()
        writes = recorder.writes
        refused = answers.pop()
        assert isinstance(refused, Exception) and "turn/start" in str(refused)
        # Every append answered with its own events and the session as it stood right after them ...
        for answer in answers:
            assert not isinstance(answer, BaseException)
            stored, lines, view = answer
            assert view.head.count == stored[-1]["seq"] + 1
            assert lines == b"".join(store.get("busy").log.lines(event["seq"], event["seq"] + 1) for event in stored)
        # ... but the group was written (and synced) far fewer times than there were appends.
        assert len(writes) < appenders / 2, len(writes)
        assert b"".join(writes) == store.get("busy").log.lines(len(b.open_turn(1)))

    asyncio.run(run())


def test_a_delete_is_not_starved_by_a_stream_of_appends(data_dir: Path, open_store: OpenStore) -> None:
    async def run() -> None:
        store = await open_store(data_dir)
        await store.create("busy", None, None)
        pending: set[asyncio.Future[Any]] = set()
        answered: list[BaseException | None] = []
        deleted = asyncio.Event()

        def settle(append: asyncio.Future[Any]) -> None:
            pending.discard(append)
            answered.append(append.exception())

        async def stream() -> None:
            # Appends keep arriving, each before the previous ones are answered, for longer than the delete may wait;
            # only the answered ones are let go, so a fair queue keeps this small whatever the disk's speed.
            deadline = asyncio.get_running_loop().time() + 3 * DELETE_PATIENCE
            while not deleted.is_set() and asyncio.get_running_loop().time() < deadline:
                append = asyncio.ensure_future(store.append("busy", [b.log_only(f"note {len(answered)}")]))
                pending.add(append)
                append.add_done_callback(settle)
                await asyncio.sleep(0)

        producer = asyncio.ensure_future(stream())
        await asyncio.sleep(0.05)
        # It gets its turn on the session between two groups, while the appends are still coming.
        await asyncio.wait_for(store.delete("busy"), DELETE_PATIENCE)
        assert not producer.done(), "the delete waited until the appends stopped coming"
        deleted.set()
        await producer
        await asyncio.gather(*list(pending), return_exceptions=True)
        assert any(answer is None for answer in answered)
        assert all(isinstance(answer, SessionError) for answer in answered if answer is not None)
        with pytest.raises(SessionError):
            store.get("busy")

    asyncio.run(run())
