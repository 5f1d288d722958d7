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

from app.backends.files import syncfs_child
from app.backends.files.cuts import CutRecords
from app.backends.files.fileops import FileOps
from app.backends.files.sync_process import ENDS_BEFORE_GIVING_UP, ProcessSyncer
from app.backends.files.syncers import SyncDone, SyncTarget, ThreadSyncer
from app.backends.files.writer import AppendWriter
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore, session_file

needs_syncfs = pytest.mark.skipif(not FileOps().has_syncfs, reason="syncfs reports write errors on Linux 5.8+ only")


class CountingSyncer:
    """A :class:`ThreadSyncer` that notes how many files each round it was given had."""

    def __init__(self) -> None:
        self.inner = ThreadSyncer(FileOps())
        self.rounds: list[int] = []

    def start(self, files: list[SyncTarget], done: SyncDone) -> None:
        self.rounds.append(len(files))
        self.inner.start(files, done)

    def prepare(self) -> None:
        self.inner.prepare()

    def close(self) -> None:
        self.inner.close()


def session_files(folder: Path, count: int) -> list[Path]:
    paths = [folder / f"s{number}.jsonl" for number in range(count)]
    for path in paths:  # a session's file exists before anything is appended to it
        path.touch()
    return paths


def test_the_appends_of_one_loop_step_share_one_sync(tmp_path: Path) -> None:
    syncer = CountingSyncer()
    ops = FileOps()
    writer = AppendWriter(ops, CutRecords(ops, sync=True), sync=True, syncer=syncer)
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
    ops = FileOps()
    writer = AppendWriter(ops, CutRecords(ops, sync=True), sync=True, syncer=syncer)
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
    ops = FileOps()
    writer = AppendWriter(ops, CutRecords(ops, sync=True), sync=True, syncer=syncer)
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

# A stand-in for the sync process (app/backends/files/syncfs_child.py), speaking its protocol: it answers EIO, or ends
# at its first request, or (``once``) ends at the first request of its first life and syncs in the next.
FAKE_CHILD = """
import os, sys
mode, marker = sys.argv[1], sys.argv[2]
pending = b""
while True:
    received = os.read(0, 4096)
    if not received:
        sys.exit(0)
    pending += received
    while len(pending) >= 4 and len(pending) >= 4 + int.from_bytes(pending[:4], "little"):
        pending = pending[4 + int.from_bytes(pending[:4], "little"):]
        if mode == "eio":
            os.write(1, (5).to_bytes(4, "little"))
        elif mode == "once" and not os.path.exists(marker):
            open(marker, "w").close()
            sys.exit(1)
        else:
            os.sync()
            os.write(1, (0).to_bytes(4, "little"))
"""


def fake_child(tmp_path: Path, mode: str) -> list[str]:
    program = tmp_path / "fake_child.py"
    program.write_text(FAKE_CHILD)
    return [sys.executable, "-I", str(program), mode, str(tmp_path / "ended-once")]


def writer_with(tmp_path: Path, argv: list[str] | None) -> tuple[AppendWriter, ProcessSyncer]:
    ops = FileOps()
    syncer = ProcessSyncer(tmp_path, fallback=ThreadSyncer(ops), argv=argv)
    return AppendWriter(ops, CutRecords(ops, sync=True), sync=True, syncer=syncer), syncer


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
                [SyncTarget(fd, syncer.device + 1, path)], lambda error, by_fd: answered.set_result((error, by_fd))
            )
            return await answered
        finally:
            os.close(fd)
            syncer.close()

    assert asyncio.run(run()) == (None, {})  # the thread synced it (the process would have answered EIO)
    assert fallback.rounds == [1]


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
def test_the_sync_process_syncs_the_one_file_of_a_round_or_the_whole_file_system(tmp_path: Path) -> None:
    (path,) = session_files(tmp_path, 1)
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", syncfs_child.__file__, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert child.stdin is not None and child.stdout is not None

    def ask(request: bytes) -> int:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(len(request).to_bytes(4, "little") + request)
        child.stdin.flush()
        return int.from_bytes(child.stdout.read(4), "little")

    try:
        assert ask(os.fsencode(path)) == 0  # fdatasync of that file
        assert ask(os.fsencode(tmp_path / "gone.jsonl")) == errno.ENOENT  # proof that it is that file's sync
        assert ask(b"") == 0  # syncfs of the file system
    finally:
        child.stdin.close()
        assert child.wait(timeout=10) == 0  # it ends once its stdin closes
        child.stdout.close()


class ScriptedSyncer:
    """A syncer the test answers itself: each round waits in ``asked`` until the test calls its ``done``."""

    def __init__(self) -> None:
        self.asked: list[tuple[list[SyncTarget], SyncDone]] = []

    def start(self, files: list[SyncTarget], done: SyncDone) -> None:
        self.asked.append((files, done))

    def prepare(self) -> None:
        return None

    def close(self) -> None:
        return None


async def until_asked(syncer: ScriptedSyncer, rounds: int) -> None:
    while len(syncer.asked) < rounds:
        await asyncio.sleep(0)


def eio() -> OSError:
    return OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_round_that_fails_as_a_whole_fails_the_appends_written_while_it_ran(tmp_path: Path) -> None:
    # Its sync may have written their pages and lost them, and the next syncfs would not say so again.
    syncer = ScriptedSyncer()
    ops = FileOps()
    writer = AppendWriter(ops, CutRecords(ops, sync=True), sync=True, syncer=syncer)
    first, later, after = session_files(tmp_path, 3)

    async def run() -> list[BaseException | None]:
        failing = asyncio.ensure_future(writer.append(first, b"a\n", instance="i", cut_record=tmp_path / "a.cut"))
        await until_asked(syncer, 1)
        written_meanwhile = asyncio.ensure_future(
            writer.append(later, b"b\n", instance="i", cut_record=tmp_path / "b.cut")
        )
        await asyncio.sleep(0.01)
        assert later.read_bytes() == b"b\n"  # written, waiting for the next round
        syncer.asked[0][1](eio(), {})
        answers = await asyncio.wait_for(asyncio.gather(failing, written_meanwhile, return_exceptions=True), 5)
        # and the round after them is a round like any other
        kept = asyncio.ensure_future(writer.append(after, b"c\n", instance="i", cut_record=tmp_path / "c.cut"))
        await until_asked(syncer, 2)
        syncer.asked[1][1](None, {})
        await kept
        await writer.close()
        return list(answers)

    answers = asyncio.run(run())
    assert all(isinstance(answer, OSError) for answer in answers), answers
    assert len(syncer.asked) == 2, "the appends written meanwhile were failed, not synced in a round of their own"
    assert (first.read_bytes(), later.read_bytes(), after.read_bytes()) == (b"", b"", b"c\n")


def test_a_file_stays_open_until_its_append_has_cut_it_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("app.backends.files.writer.OPEN_FILES", 0)  # every file is closed as soon as it may be
    syncer = ScriptedSyncer()
    ops = FileOps()
    writer = AppendWriter(ops, CutRecords(ops, sync=True), sync=True, syncer=syncer)
    (path,) = session_files(tmp_path, 1)
    path.write_bytes(b"kept\n")

    async def run() -> None:
        refused = asyncio.ensure_future(writer.append(path, b"lost\n", instance="i", cut_record=tmp_path / "s.cut"))
        await until_asked(syncer, 1)
        syncer.asked[0][1](eio(), {})
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
    ops = FileOps()
    writer = AppendWriter(ops, CutRecords(ops, sync=True), sync=True, syncer=syncer)
    first, second = session_files(tmp_path, 2)

    async def left_unanswered() -> None:
        left = asyncio.ensure_future(writer.append(first, b"a\n", instance="i", cut_record=tmp_path / "a.cut"))
        await until_asked(syncer, 1)
        assert not left.done()  # and asyncio.run cancels it as it ends

    async def later() -> None:
        appended = asyncio.ensure_future(writer.append(second, b"b\n", instance="i", cut_record=tmp_path / "b.cut"))
        await asyncio.wait_for(until_asked(syncer, 2), 5)
        syncer.asked[1][1](None, {})
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
