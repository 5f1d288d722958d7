"""Appends share sync rounds; the rounds are synced by a process of their own where the system allows, and a round
that process fails (or does not answer, having ended) fails its appends and leaves their files as they were."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.backends.files.appends import syncfs_child
from app.backends.files.appends.cuts import CutRecords
from app.backends.files.appends.sync_process import ENDS_BEFORE_GIVING_UP, ProcessSyncer, _request
from app.backends.files.appends.syncers import RoundAppend, SyncDone, Syncer, SyncTarget, ThreadSyncer
from app.backends.files.appends.writer import AppendWriter
from app.backends.files.disk.fileops import FileOps
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore, session_file

needs_syncfs = pytest.mark.skipif(not FileOps().has_syncfs, reason="syncfs reports write errors on Linux 5.8+ only")


class CountingSyncer:
    """A :class:`ThreadSyncer` that notes how many files each round it was given had."""

    def __init__(self) -> None:
        self.inner = ThreadSyncer(FileOps())
        self.rounds: list[int] = []

    def start(self, appends: list[RoundAppend], done: SyncDone) -> None:
        self.rounds.append(len(appends))
        self.inner.start(appends, done)

    def prepare(self) -> None:
        self.inner.prepare()

    def close(self) -> None:
        self.inner.close()


def inode_of(path: Path) -> int:
    return 0 if not path.exists() else path.stat().st_ino


def syncing_writer(syncer: Syncer) -> AppendWriter:
    """A writer with fsync on whose rounds go to ``syncer``."""
    ops = FileOps()
    return AppendWriter(ops, CutRecords(ops, sync=True), sync=True, syncer=syncer)


def session_files(folder: Path, count: int) -> list[Path]:
    paths = [folder / f"s{number}.jsonl" for number in range(count)]
    for path in paths:  # a session's file exists before anything is appended to it
        path.touch()
    return paths


def test_the_appends_of_one_loop_step_share_one_sync(tmp_path: Path) -> None:
    syncer = CountingSyncer()
    writer = syncing_writer(syncer)
    paths = session_files(tmp_path, 8)

    async def run() -> None:
        await asyncio.gather(
            *(writer.append(path, b'{"n":1}\n', instance="i", cut_record=tmp_path / "cut") for path in paths)
        )
        await writer.close()

    asyncio.run(run())
    assert syncer.rounds == [len(paths)]
    assert [path.read_bytes() for path in paths] == [b'{"n":1}\n'] * len(paths)


def test_appends_written_while_a_round_runs_share_the_next(tmp_path: Path) -> None:
    syncer = CountingSyncer()
    writer = syncing_writer(syncer)
    first, *others = session_files(tmp_path, 6)

    async def run() -> None:
        running = asyncio.ensure_future(writer.append(first, b"a\n", instance="i", cut_record=tmp_path / "cut"))
        while not syncer.rounds:  # until its round has started
            await asyncio.sleep(0)
        assert syncer.rounds == [1]
        await asyncio.gather(
            running, *(writer.append(path, b"b\n", instance="i", cut_record=tmp_path / "cut") for path in others)
        )
        await writer.close()

    asyncio.run(run())
    assert syncer.rounds == [1, len(others)]


def test_an_append_under_way_as_the_writer_closes_is_written_and_synced(tmp_path: Path) -> None:
    syncer = CountingSyncer()
    writer = syncing_writer(syncer)
    (path,) = session_files(tmp_path, 1)

    async def run() -> None:
        appended = asyncio.ensure_future(writer.append(path, b"line\n", instance="i", cut_record=tmp_path / "cut"))
        await asyncio.sleep(0)  # written, its sync not answered yet
        await writer.close()
        assert appended.done()
        await appended

    asyncio.run(run())
    assert path.read_bytes() == b"line\n"
    assert syncer.rounds == [1]


# -- the sync process ------------------------------------------------------------------------------------------------

# A stand-in for the sync process (app/backends/files/appends/syncfs_child.py), speaking its protocol: it answers EIO,
# or ends at its first request, or (``once``) ends at the first request of its first life and syncs in the next.
FAKE_CHILD = """
import os, sys
mode, marker = sys.argv[1], sys.argv[2]
pending = b""
while True:
    received = os.read(0, 1 << 20)
    if not received:
        sys.exit(0)
    pending += received
    while len(pending) >= 8 and len(pending) >= 8 + int.from_bytes(pending[:8], "little"):
        size = int.from_bytes(pending[:8], "little")
        body, pending = pending[8 : 8 + size], pending[8 + size :]
        count, offset = int.from_bytes(body[:4], "little"), 4
        for _ in range(count):  # each append's lines are written, as the real process does
            size = int.from_bytes(body[offset : offset + 4], "little")
            path = body[offset + 4 : offset + 4 + size]
            offset += 4 + size + 8  # and the file's inode number
            size = int.from_bytes(body[offset : offset + 4], "little")
            lines = body[offset + 4 : offset + 4 + size]
            offset += 4 + size
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.write(fd, lines)
            os.close(fd)
        if mode == "once" and not os.path.exists(marker):
            open(marker, "w").close()
            sys.exit(1)
        round_code = 5 if mode == "eio" else 0
        os.sync()
        os.write(1, round_code.to_bytes(4, "little") + bytes(4 * count))
"""


def fake_child(tmp_path: Path, mode: str) -> list[str]:
    program = tmp_path / "fake_child.py"
    program.write_text(FAKE_CHILD)
    return [sys.executable, "-I", str(program), mode, str(tmp_path / "ended-once")]


def writer_with(tmp_path: Path, argv: list[str] | None) -> tuple[AppendWriter, ProcessSyncer]:
    syncer = ProcessSyncer(tmp_path, fallback=ThreadSyncer(FileOps()), argv=argv)
    return syncing_writer(syncer), syncer


def children_running(program: str) -> int:
    """How many processes of this one's children run ``program``."""
    count = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:"))
        if int(parent) == os.getpid() and program.encode() in command:
            count += 1
    return count


@needs_syncfs
def test_the_rounds_are_synced_by_a_process_that_ends_with_the_writer(tmp_path: Path) -> None:
    writer, _ = writer_with(tmp_path, None)
    paths = session_files(tmp_path, 4)

    async def run() -> None:
        for line in (b"a\n", b"b\n"):
            await asyncio.gather(
                *(writer.append(path, line, instance="i", cut_record=tmp_path / "cut") for path in paths)
            )
        assert children_running("syncfs_child.py") == 1
        await writer.close()
        assert children_running("syncfs_child.py") == 0

    asyncio.run(run())
    assert [path.read_bytes() for path in paths] == [b"a\nb\n"] * len(paths)


@needs_syncfs
def test_a_round_the_process_fails_fails_its_appends_and_cuts_their_files_back(tmp_path: Path) -> None:
    writer, _ = writer_with(tmp_path, fake_child(tmp_path, "eio"))
    paths = session_files(tmp_path, 3)
    for path in paths:
        path.write_bytes(b"kept\n")

    async def run() -> list[BaseException | None]:
        answers = await asyncio.gather(
            *(writer.append(path, b"refused\n", instance="i", cut_record=tmp_path / "cut") for path in paths),
            return_exceptions=True,
        )
        await writer.close()
        return answers

    answers = asyncio.run(run())
    assert all(isinstance(answer, OSError) and answer.errno == errno.EIO for answer in answers), answers
    assert [path.read_bytes() for path in paths] == [b"kept\n"] * len(paths)


@needs_syncfs
def test_a_process_that_ends_fails_its_round_and_the_next_round_starts_another(tmp_path: Path) -> None:
    writer, _ = writer_with(tmp_path, fake_child(tmp_path, "once"))
    (path,) = session_files(tmp_path, 1)

    async def run() -> None:
        with pytest.raises(OSError) as failed:
            await writer.append(path, b"lost\n", instance="i", cut_record=tmp_path / "cut")
        assert failed.value.errno == errno.EIO
        assert path.read_bytes() == b""
        await writer.append(path, b"kept\n", instance="i", cut_record=tmp_path / "cut")
        await writer.close()

    asyncio.run(run())
    assert path.read_bytes() == b"kept\n"


@needs_syncfs
def test_a_file_on_another_file_system_is_synced_in_a_thread(tmp_path: Path) -> None:
    fallback = CountingSyncer()
    syncer = ProcessSyncer(tmp_path, fallback=fallback.inner, argv=fake_child(tmp_path, "eio"))
    syncer._fallback = fallback  # type: ignore[assignment]
    (path,) = session_files(tmp_path, 1)

    async def run() -> tuple[OSError | None, dict[int, OSError]]:
        answered: asyncio.Future[tuple[OSError | None, dict[int, OSError]]] = asyncio.get_running_loop().create_future()
        fd = os.open(path, os.O_WRONLY)
        try:
            syncer.start(
                [(SyncTarget(fd, syncer.device + 1, path, inode_of(path)), b"line\n")],
                lambda error, by_place: answered.set_result((error, by_place)),
            )
            return await answered
        finally:
            os.close(fd)
            syncer.close()

    assert asyncio.run(run()) == (None, {})  # the thread synced it (the process would have answered EIO)
    assert fallback.rounds == [1]
    assert path.read_bytes() == b"line\n"


def test_a_store_syncs_through_the_process_unless_its_os_seam_makes_the_sync_calls(data_dir: Path) -> None:
    class OwnSync(FileOps):
        def fdatasync(self, fd: int) -> None:
            os.fdatasync(fd)

    assert OwnSync().syncs_natively is False
    assert FileOps().syncs_natively is FileOps().has_syncfs

    async def run() -> None:
        store = await FileStore(data_dir, FileOps()).open()
        await store.create("s", b.turns(1, 1), None)
        await store.append("s", b.full_turn(2))
        assert children_running("syncfs_child.py") == (1 if FileOps().has_syncfs else 0)
        lines = session_file(data_dir, "s").read_bytes()
        await store.close()
        assert session_file(data_dir, "s").read_bytes() == lines

    asyncio.run(run())


@needs_syncfs
def test_the_sync_process_appends_each_round_and_answers_each_append(tmp_path: Path) -> None:
    first, second = session_files(tmp_path, 2)
    (tmp_path / "link.jsonl").symlink_to(first)
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", syncfs_child.__file__, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None

    def ask(*appends: tuple[Path, bytes]) -> list[int]:
        """The round's code, then each append's."""
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(_request([(SyncTarget(-1, 0, path, inode_of(path)), lines) for path, lines in appends]))
        child.stdin.flush()
        answer = child.stdout.read(4 * (len(appends) + 1))
        return [int.from_bytes(answer[start : start + 4], "little") for start in range(0, len(answer), 4)]

    try:
        assert ask((first, b"a\n")) == [0, 0]  # a round of one append: fdatasync of its file
        assert ask((tmp_path / "gone.jsonl", b"x\n")) == [0, errno.ENOENT]  # it opens that file, never makes one
        assert ask((tmp_path / "link.jsonl", b"x\n")) == [0, errno.ELOOP]  # nor follows a symbolic link
        assert ask((first, b"b\n"), (second, b"c\n")) == [0, 0, 0]  # several: one syncfs
        assert ask((second, b"")) == [0, 0]  # lines written already: only the sync
        with second.open("ab") as written:
            written.write(b"d\n")
        assert ask((first, b"e\n"), (second, b"")) == [0, 0, 0]  # one written here, one before: syncfs and fdatasync
        remade = tmp_path / "remade.jsonl"
        remade.touch()
        stale = SyncTarget(-1, 0, remade, inode_of(first))
        child.stdin.write(_request([(stale, b"x\n")]))
        child.stdin.flush()
        assert child.stdout.read(8) == (0).to_bytes(4, "little") + errno.ESTALE.to_bytes(4, "little")  # not that file
    finally:
        child.stdin.close()
        assert child.wait(timeout=10) == 0  # it ends once its stdin closes
        child.stdout.close()
    assert (first.read_bytes(), second.read_bytes(), (tmp_path / "remade.jsonl").read_bytes()) == (
        b"a\nb\ne\n",
        b"c\nd\n",
        b"",
    )


class ScriptedSyncer:
    """A syncer the test answers itself: each round waits in ``asked`` until the test calls its ``done``."""

    def __init__(self) -> None:
        self.asked: list[tuple[list[RoundAppend], SyncDone]] = []

    def start(self, appends: list[RoundAppend], done: SyncDone) -> None:
        self.asked.append((appends, done))

    def answer(self, number: int, error: OSError | None = None) -> None:
        """Answer round ``number`` (its lines written, as a syncer writes them) with ``error``, or as durable."""
        appends, done = self.asked[number]
        for target, lines in appends:
            os.write(target.fd, lines)
        done(error, {})

    def prepare(self) -> None:
        return None

    def close(self) -> None:
        return None


async def until_asked(syncer: ScriptedSyncer, rounds: int) -> None:
    while len(syncer.asked) < rounds:
        await asyncio.sleep(0)


def eio() -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


def test_an_append_written_before_its_round_is_synced_through_its_own_file(tmp_path: Path) -> None:
    # A large append is written by a worker thread before it joins a round, maybe while a sync that failed ran: the
    # round's syncfs would not report that error again, its own file's fdatasync does.
    synced: list[int] = []

    class Spy(FileOps):
        def fdatasync(self, fd: int) -> None:
            synced.append(os.fstat(fd).st_ino)
            os.fdatasync(fd)

    ops = Spy()
    syncer = ThreadSyncer(ops)
    small, large = session_files(tmp_path, 2)
    large.write_bytes(b"written before\n")

    async def run() -> tuple[OSError | None, dict[int, OSError]]:
        answered: asyncio.Future[tuple[OSError | None, dict[int, OSError]]] = asyncio.get_running_loop().create_future()
        fds = [os.open(path, os.O_WRONLY | os.O_APPEND) for path in (small, large)]
        try:
            targets = [
                SyncTarget(fd, os.fstat(fd).st_dev, path, inode_of(path))
                for fd, path in zip(fds, (small, large), strict=True)
            ]
            syncer.start(
                [(targets[0], b"a\n"), (targets[1], b"")],
                lambda error, by_place: answered.set_result((error, by_place)),
            )
            return await answered
        finally:
            for fd in fds:
                os.close(fd)
            syncer.close()

    assert asyncio.run(run()) == (None, {})
    assert (small.read_bytes(), large.read_bytes()) == (b"a\n", b"written before\n")
    assert large.stat().st_ino in synced
    if ops.has_syncfs:
        assert small.stat().st_ino not in synced  # its lines were written in the round: the round's syncfs


def test_a_file_stays_open_until_its_append_has_cut_it_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.backends.files.appends.writer.OPEN_FILES", 0)  # every file is closed as soon as it may be
    syncer = ScriptedSyncer()
    writer = syncing_writer(syncer)
    (path,) = session_files(tmp_path, 1)
    path.write_bytes(b"kept\n")

    async def run() -> None:
        refused = asyncio.ensure_future(writer.append(path, b"lost\n", instance="i", cut_record=tmp_path / "s.cut"))
        await until_asked(syncer, 1)
        syncer.answer(0, eio())
        writer._trim_open()  # another append ending before this one resumes: it must not close this file
        with pytest.raises(OSError):
            await refused
        assert path.read_bytes() == b"kept\n"  # cut back by the append itself, through its own descriptor
        assert not (tmp_path / "s.cut").exists()
        await writer.close()

    asyncio.run(run())
    assert path.read_bytes() == b"kept\n"
    assert not (tmp_path / "s.cut").exists()


def test_a_store_used_again_from_another_event_loop_does_not_wait_for_a_round_of_the_first(tmp_path: Path) -> None:
    syncer = ScriptedSyncer()
    writer = syncing_writer(syncer)
    first, second = session_files(tmp_path, 2)

    async def left_unanswered() -> None:
        left = asyncio.ensure_future(writer.append(first, b"a\n", instance="i", cut_record=tmp_path / "a.cut"))
        await until_asked(syncer, 1)
        assert not left.done()  # and asyncio.run cancels it as it ends

    async def later() -> None:
        appended = asyncio.ensure_future(writer.append(second, b"b\n", instance="i", cut_record=tmp_path / "b.cut"))
        await asyncio.wait_for(until_asked(syncer, 2), 5)
        syncer.answer(1)
        await asyncio.wait_for(appended, 5)
        await asyncio.wait_for(writer.close(), 5)

    asyncio.run(left_unanswered())
    asyncio.run(later())
    assert second.read_bytes() == b"b\n"


@needs_syncfs
def test_a_sync_process_that_cannot_serve_hands_the_rounds_to_a_thread(tmp_path: Path) -> None:
    writer, _ = writer_with(tmp_path, [sys.executable, "-I", "-c", "raise SystemExit(1)"])
    (path,) = session_files(tmp_path, 1)

    async def run() -> list[BaseException | None]:
        answers: list[BaseException | None] = []
        for number in range(5):
            try:
                await writer.append(path, b"%d\n" % number, instance="i", cut_record=tmp_path / "cut")
                answers.append(None)
            except OSError as exc:
                answers.append(exc)
        await writer.close()
        return answers

    answers = asyncio.run(run())
    failed = [number for number, answer in enumerate(answers) if answer is not None]
    assert len(failed) <= ENDS_BEFORE_GIVING_UP, answers  # each round it had fails, until it is given up
    assert answers[ENDS_BEFORE_GIVING_UP:] == [None] * (len(answers) - ENDS_BEFORE_GIVING_UP)  # the thread syncs
    assert path.read_bytes() == b"".join(b"%d\n" % number for number in range(len(answers)) if number not in failed)
