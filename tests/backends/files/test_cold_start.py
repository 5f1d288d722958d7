"""A start on files no checkpoint covers (copied in, restored without their index, written by another program):
every event is checked once, and that check is made durable before the service is ready, so that a crash at any
moment after readiness restarts without checking the store again."""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.backends.files.start.parallel_checks import FullChecks
from app.backends.files.start.recovery import Recovery
from app.domain.errors import ErrorCode, ForklogError
from app.domain.log import seed_log
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore, OpenStore, observe

T0 = 1_785_000_000_000


def write_dsh_log(data_dir: Path, session_id: str, events: list[dict[str, Any]], *, created_at: int = T0) -> bytes:
    """A DSH log written straight into ``sessions/`` (a DSH header: no instance), as another program leaves it."""
    header = {"type": "session", "version": 0, "id": session_id, "createdAt": created_at, "cwd": "/w"}
    lines = seed_log(events, now=created_at).lines()
    folder = data_dir / "sessions"
    folder.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(header) + b"\n" + lines
    (folder / f"{session_id}.jsonl").write_bytes(data)
    return data


def uncovered_store(data_dir: Path, sessions: int, turns: int) -> list[str]:
    names = [f"copied-{number}" for number in range(sessions)]
    for number, name in enumerate(names):
        write_dsh_log(data_dir, name, b.turns(1, turns), created_at=T0 + number)
    return names


def test_a_crash_right_after_a_cold_start_checks_only_what_came_after(data_dir: Path, open_store: OpenStore) -> None:
    names = uncovered_store(data_dir, sessions=6, turns=40)
    total = 6 * len(b.turns(1, 40))

    async def scenario() -> None:
        store = await open_store(data_dir)  # no background rounds: only what the start itself wrote
        assert store.backend.recovery.checked_events == total  # nothing covered these files: all checked
        for name in names:
            await store.append(name, [b.log_only("after the cold start")])
        expected = {name: observe(store, name) for name in names}
        await store.crash()  # kill -9 right after readiness: no round ran since

        again = await open_store(data_dir)
        report = again.backend.recovery
        assert report.checked == {again.key(name): 1 for name in names}  # the appended event, not the whole logs
        assert report.events == total + len(names)
        assert {name: observe(again, name) for name in names} == expected

    asyncio.run(scenario())


# -- files checked by worker processes ------------------------------------------------------------------------------


def damaged_copies(data_dir: Path) -> dict[str, str]:
    """Files of every kind a start meets beside good ones, written straight into ``sessions/``: damaged ones (what
    each is), a torn last line and packed chunk rows (both good). Returns the damaged ids and their damage."""
    uncovered_store(data_dir, sessions=5, turns=12)
    folder = data_dir / "sessions"

    def lines_of(name: str) -> list[bytes]:
        return write_dsh_log(data_dir, name, b.turns(1, 12)).split(b"\n")

    lines = lines_of("bad-line")
    lines[7] = b'{"type":"assistant/chunk","seq":6,'
    (folder / "bad-line.jsonl").write_bytes(b"\n".join(lines))
    lines = lines_of("seq-gap")
    del lines[30]
    (folder / "seq-gap.jsonl").write_bytes(b"\n".join(lines))
    lines = lines_of("broken-rule")
    event = orjson.loads(lines[40])
    event["data"] = {"turn": 99, **{key: value for key, value in event["data"].items() if key != "turn"}}
    lines[40] = orjson.dumps(event)
    (folder / "broken-rule.jsonl").write_bytes(b"\n".join(lines))
    lines = lines_of("split-line")
    split = lines[2].index(b',"seq"')  # an event over two lines, and two events on one: joined by commas, valid JSON
    lines[2:5] = [lines[2][:split], lines[2][split + 1 :], lines[3] + b"," + lines[4]]
    (folder / "split-line.jsonl").write_bytes(b"\n".join(lines))
    lines = lines_of("type-not-a-string")
    event = orjson.loads(lines[20])
    event["type"] = [event["type"]]  # (unhashable: it once made the whole start fail, every session with it)
    lines[20] = orjson.dumps(event)
    (folder / "type-not-a-string.jsonl").write_bytes(b"\n".join(lines))
    lines = lines_of("newer")
    lines[0] = lines[0].replace(b'"version":0', b'"version":3')
    (folder / "newer.jsonl").write_bytes(b"\n".join(lines))
    (folder / "empty.jsonl").write_bytes(b"")
    torn = write_dsh_log(data_dir, "torn", b.turns(1, 12))
    (folder / "torn.jsonl").write_bytes(torn + b'{"type":"forklog-test/note","seq":')
    (folder / "packed.jsonl").write_bytes(b.packed(b"\n".join(lines_of("packed"))))
    return {
        "bad-line": "line 8 is not a storage record",
        "seq-gap": "seq gap at line 31",
        "split-line": "line 3 is not a storage record",
        "broken-rule": "breaks the rules",
        "type-not-a-string": "'type' must be a string",
        "newer": "newer",
        "empty": "no complete header line",
    }


def test_a_damaged_file_found_by_the_workers_is_kept_out_with_the_reason_a_start_in_one_process_gives(
    tmp_path: Path,
) -> None:
    serial_dir, parallel_dir = tmp_path / "serial", tmp_path / "parallel"
    damage = damaged_copies(serial_dir)
    shutil.copytree(serial_dir, parallel_dir)

    async def scenario() -> None:
        serial = await FileStore(serial_dir, check_workers=0).open()
        parallel = await FileStore(parallel_dir, check_workers=2, parallel_check_bytes=0).open()
        try:
            assert parallel.backend.recovery.parallel_files > 0 and serial.backend.recovery.parallel_files == 0
            readiness = {}
            for name, store in (("serial", serial), ("parallel", parallel)):
                answer = await store.backend.readiness()
                readiness[name] = (answer.sessions, sorted((e.tenant, e.id, e.reason) for e in answer.corrupt))
            assert readiness["parallel"] == readiness["serial"]
            sessions, corrupt = readiness["parallel"]
            assert sessions == 5 + 2  # the good ones, the torn one and the packed one
            assert [entry[1] for entry in corrupt] == sorted(damage)
            for _, session_id, reason in corrupt:
                assert damage[session_id] in reason
                with pytest.raises(ForklogError) as refused:
                    await parallel.append(session_id, [b.log_only("to a damaged log")])
                assert refused.value.code == ErrorCode.SESSION_CORRUPT
            good = [live.key.id for live in serial.page()]
            assert sorted(good) == sorted(live.key.id for live in parallel.page())
            assert {name: observe(parallel, name) for name in good} == {name: observe(serial, name) for name in good}
            assert (parallel_dir / "sessions" / "torn.jsonl").read_bytes() == (
                serial_dir / "sessions" / "torn.jsonl"
            ).read_bytes()  # the torn tail cut away alike
        finally:
            await serial.close()
            await parallel.close()

    asyncio.run(scenario())


def test_what_the_workers_checked_is_not_checked_again_after_a_crash(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    names = uncovered_store(data_dir, sessions=6, turns=20)
    total = 6 * len(b.turns(1, 20))

    async def scenario() -> None:
        store = await FileStore(data_dir, check_workers=2, parallel_check_bytes=0).open()
        assert store.backend.recovery.parallel_files == 6
        assert store.backend.recovery.checked_events == total
        assert store.backend.checkpointer is not None and store.backend.checkpointer.pending == 0  # journaled
        await store.append(names[0], [b.log_only("after the cold start")])
        expected = {name: observe(store, name) for name in names}
        await store.crash()

        again = await FileStore(data_dir, check_workers=2, parallel_check_bytes=0).open()
        try:
            assert again.backend.recovery.checked == {again.key(names[0]): 1}
            assert again.backend.recovery.parallel_files == 0
            assert {name: observe(again, name) for name in names} == expected
        finally:
            await again.close()

    asyncio.run(scenario())


class _NoProcesses:
    """A process pool that cannot be had (a sandbox's limits, no shared memory)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")


class _DyingWorkers(concurrent.futures.ThreadPoolExecutor):
    """A pool whose every worker dies before it answers (killed, out of memory)."""

    def __init__(self, workers: int, **kwargs: Any) -> None:
        super().__init__(workers)

    def submit(self, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        future.set_exception(BrokenProcessPool("a child process terminated abruptly"))
        return future


@pytest.mark.parametrize("pool", [_NoProcesses, _DyingWorkers], ids=["no processes", "dying workers"])
def test_without_worker_processes_the_start_checks_every_file_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: type
) -> None:
    serial_dir, parallel_dir = tmp_path / "serial", tmp_path / "parallel"
    damage = damaged_copies(serial_dir)
    shutil.copytree(serial_dir, parallel_dir)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", pool)

    async def scenario() -> None:
        serial = await FileStore(serial_dir, check_workers=0).open()
        without = await FileStore(parallel_dir, check_workers=2, parallel_check_bytes=0).open()
        try:
            assert without.backend.recovery.parallel_files == 0
            assert sorted((e.id, e.reason) for e in without.corrupt) == sorted((e.id, e.reason) for e in serial.corrupt)
            assert sorted(e.id for e in without.corrupt) == sorted(damage)
            good = [live.key.id for live in serial.page()]
            assert {name: observe(without, name) for name in good} == {name: observe(serial, name) for name in good}
        finally:
            await serial.close()
            await without.close()

    asyncio.run(scenario())


def test_the_workers_start_before_the_first_file_when_the_start_expects_enough_bytes(tmp_path: Path) -> None:
    names = uncovered_store(tmp_path, sessions=3, turns=4)
    tasks = [("default", name, str(tmp_path / "sessions" / f"{name}.jsonl")) for name in names]
    sizes = [Path(path).stat().st_size for _, _, path in tasks]
    few: FullChecks[None] = FullChecks(now=T0, workers=2, start_bytes=sum(sizes) + 1)
    few.expect(sum(sizes))
    assert not few.started
    many: FullChecks[None] = FullChecks(now=T0, workers=2, start_bytes=sum(sizes))
    many.expect(sum(sizes))
    try:
        assert many.started  # before any file was handed over
        verdicts = [
            verdict for task, size in zip(tasks, sizes, strict=True) for _, verdict in many.add((*task, size), None)
        ]
        verdicts += [verdict for _, verdict in many.drain()]
    finally:
        many.close()
    assert len(verdicts) == 3 and all(verdict is not None and verdict[2] is None for verdict in verdicts)
    assert many.files == 3


_KILLED_START = """
import sys, time
from app.backends.files.start.parallel_checks import FullChecks

checks = FullChecks(now=0, workers=2, start_bytes=0)
path = sys.argv[1]
for number in range(4):  # two batches a worker: both workers start
    list(checks.add(("default", f"s{number}", path, 3 * 1024 * 1024), number))
print("checking", flush=True)
time.sleep(120)
"""


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the process tree from /proc (Linux)")
def test_the_check_workers_end_with_a_start_that_is_killed(tmp_path: Path) -> None:
    """A start killed while its files are checked (an operator's kill -9, the OOM killer) leaves no worker behind,
    waiting for work that never comes and holding its memory."""
    log = tmp_path / "s.jsonl"
    log.write_bytes(b'{"type":"session","version":0,"id":"s","createdAt":1}\n' + b"x" * (3 * 1024 * 1024))
    with subprocess.Popen(
        [sys.executable, "-c", _KILLED_START, str(log)], stdout=subprocess.PIPE, cwd=Path(__file__).parents[3]
    ) as start:
        try:
            assert start.stdout is not None and start.stdout.readline() == b"checking\n"
            workers: list[int] = []
            deadline = time.monotonic() + 30
            while len(workers) < 2 and time.monotonic() < deadline:
                workers = [
                    pid for pid in _children(start.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
                ]
                time.sleep(0.05)
            assert len(workers) == 2
        finally:
            start.kill()
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(pid) for pid in workers)


def test_files_read_before_the_service_opens_are_the_files_it_serves(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a start begins before its event loop runs (app.cli.serve) is what open() takes up: read once, and a
    failure to read is the open's failure."""
    names = uncovered_store(data_dir, sessions=3, turns=2)
    runs: list[int] = []
    real_run = Recovery.run

    def counted(self: Recovery, *args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(Recovery, "run", counted)
    early = FileStore(data_dir)
    early.backend.begin_opening()
    early.backend.begin_opening()

    async def served() -> None:
        await early.open()
        try:
            assert sorted(live.key.id for live in early.page()) == sorted(names)
            assert early.backend.recovery.checked_events == 3 * len(b.turns(1, 2))
        finally:
            await early.close()

    asyncio.run(served())
    assert runs == [1]

    def refused(self: Recovery, *args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Recovery, "run", refused)
    failing = FileStore(data_dir)
    failing.backend.begin_opening()

    async def fails() -> None:
        with pytest.raises(OSError, match="Input/output error"):
            await failing.open()
        await failing.backend.close()

    asyncio.run(fails())


def test_a_store_closed_while_its_files_are_read_is_closed_once_the_reading_stops(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service stopped during a long start (SIGTERM while a cold start checks its files) closes its store only
    once the thread reading the files has stopped, after the file it was reading: nothing is written to, or
    unlocked under, that thread."""
    names = uncovered_store(data_dir, sessions=6, turns=2)
    read: list[str] = []
    reading, go_on = threading.Event(), threading.Event()
    real_read = Recovery._recover_file

    def held_up(self: Recovery, space: Any, folder: str, name: str, *args: Any) -> int:
        read.append(name)
        reading.set()
        go_on.wait(10)
        return real_read(self, space, folder, name, *args)

    monkeypatch.setattr(Recovery, "_recover_file", held_up)
    stopped = FileStore(data_dir)
    stopped.backend.begin_opening()
    assert reading.wait(10)

    async def close_while_reading() -> None:
        closing = asyncio.create_task(stopped.backend.close())
        await asyncio.sleep(0.2)
        assert not closing.done()  # the file being read is read to its end first
        go_on.set()
        await closing

    asyncio.run(close_while_reading())
    assert len(read) == 1  # and no file after it
    monkeypatch.setattr(Recovery, "_recover_file", real_read)

    async def reopened() -> None:
        again = await FileStore(data_dir).open()
        try:
            assert sorted(live.key.id for live in again.page()) == sorted(names)
        finally:
            await again.close()

    asyncio.run(reopened())
