"""A full disk: 503 STORAGE_UNAVAILABLE, every earlier event kept, and the service recovers when space returns.

Two variants. The real one runs the server process on a 2 MiB tmpfs (Linux, root, ``mount`` permitted; skipped
with the reason otherwise) and fills it for real. The in-process one runs everywhere: the app over a data
directory whose writes (``os.write``, and ``os.fdatasync``/``os.fsync``) fail with ENOSPC or EIO for a while,
including a write that fails half-way through an append (which must be rolled back).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.files import FileBackend, FileOps
from app.domain.clock import wall_clock_ms
from app.domain.listing import PageRequest
from app.domain.session import DEFAULT_TENANT, SessionKey
from tests.events import user_message
from tests.fuzz.support import (
    ServerProcess,
    assert_no_forbidden_5xx,
    data_files,
    problem_code,
    turn_events,
)


def _padded_turn(turn: int, pad: int) -> list[dict[str, Any]]:
    """A whole turn whose user message carries ``pad`` bytes of text."""
    events = turn_events(turn)
    events[1] = user_message("x" * pad)
    return events


# -- on a real, small file system --------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a 2 MiB tmpfs needs root; the in-process variant covers a full disk")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the in-process variant covers it")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_full_disk_answers_503_keeps_everything_and_recovers(small_disk: Path, tmp_path: Path) -> None:
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * 256 * 1024)  # given back later: "space returns"
    data_dir = small_disk / "data"
    # (raw files: the padded turns would compress to almost nothing, and the disk would not fill)
    server = ServerProcess(data_dir, log_path=tmp_path / "server.log", args=("--compression", "none")).start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            assert client.post("/sessions", json={"id": "full"}).status_code == 201
            acked: list[dict[str, Any]] = []
            refused: httpx.Response | None = None
            turn = 1
            for _ in range(500):
                answer = client.post(
                    "/sessions/full/events", json={"events": _padded_turn(turn, 24 * 1024), "expectedSeq": len(acked)}
                )
                if answer.status_code != 201:
                    refused = answer
                    break
                acked.extend(answer.json()["events"])
                turn += 1
            assert refused is not None, "the disk never filled up"
            assert problem_code(refused) == "STORAGE_UNAVAILABLE", refused.text
            assert len(acked) > 0

            # Full: every other write is refused the same way; reads go on; nothing half-written is visible.
            fork = client.post("/sessions/full/fork", json={"sessionId": "full-child"})
            assert problem_code(fork) == "STORAGE_UNAVAILABLE", fork.text
            for attempt in range(3):
                again = client.post(
                    "/sessions/full/events", json={"events": _padded_turn(turn, 24 * 1024), "expectedSeq": len(acked)}
                )
                assert problem_code(again) == "STORAGE_UNAVAILABLE", (attempt, again.text)
            session = client.get("/sessions/full").json()
            assert session["eventCount"] == len(acked)
            assert client.get("/sessions/full/events").json()["events"] == acked
            assert client.get("/sessions/full/history").status_code == 200
            assert client.get("/sessions/nope").status_code == 404
            on_disk = (data_dir / "sessions" / "full.jsonl").read_bytes()
            assert on_disk.endswith(b"\n") and on_disk.count(b"\n") == 1 + len(acked)
            assert not list((data_dir / "tmp").iterdir())

            # Space returns (a quarter of the disk): the append goes through, and so does a fork (of the first turn,
            # which fits: the whole log would not).
            ballast.unlink()
            retried = client.post(
                "/sessions/full/events", json={"events": _padded_turn(turn, 1024), "expectedSeq": len(acked)}
            )
            assert retried.status_code == 201, retried.text
            assert retried.json()["events"][0]["seq"] == len(acked)
            acked.extend(retried.json()["events"])
            first_turn = len(turn_events(1))
            fork = client.post("/sessions/full/fork", json={"sessionId": "full-child", "atSeq": first_turn - 1})
            assert fork.status_code == 201, fork.text
            assert fork.json()["eventCount"] == first_turn

        # And a crash now loses nothing: every acknowledged event is there after kill -9 and a restart.
        server.kill()
        server.start()
        with httpx.Client(base_url=server.base_url, timeout=30) as client:
            assert client.get("/readyz").json()["corrupt"] == []
            assert client.get("/sessions/full/events").json()["events"] == acked
            assert client.get("/sessions/full-child/events").json()["events"] == acked[: len(turn_events(1))]
    finally:
        server.stop()


# -- in process: the writes fail for a while ---------------------------------------------------------------------------


class FailingDisk(FileOps):
    """The file backend's OS seam, refusing writes (or syncs) to files under ``root`` while ``failing``."""

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve())
        self.failing = False
        self.error = errno.ENOSPC
        self.half_write_first = False
        self.sync_fails = False
        self.refused = 0

    def _ours(self, fd: int) -> bool:
        with contextlib.suppress(OSError):
            return os.readlink(f"/proc/self/fd/{fd}").startswith(self.root)
        return False

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.failing and not self.sync_fails and self._ours(fd):
            if self.half_write_first and len(data) > 1:
                self.half_write_first = False
                return os.write(fd, memoryview(data)[: len(data) // 2])
            self.refused += 1
            raise OSError(self.error, os.strerror(self.error))
        return os.write(fd, data)

    def _check_sync(self, fd: int) -> None:
        if self.failing and self.sync_fails and self._ours(fd):
            self.refused += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    def fdatasync(self, fd: int) -> None:
        self._check_sync(fd)
        os.fdatasync(fd)

    def fsync(self, fd: int) -> None:
        self._check_sync(fd)
        os.fsync(fd)

    def syncfs(self, fd: int) -> None:
        self._check_sync(fd)
        super().syncfs(fd)


async def _in_process(data_dir: Path, disk: FailingDisk) -> None:
    backend = FileBackend(data_dir, clock=wall_clock_ms, ops=disk, compression="none")
    app = create_app(Settings(data_dir=data_dir, fsync=True), backend=backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            while (await client.get("/readyz")).status_code != 200:
                await asyncio.sleep(0.01)
            assert (await client.post("/sessions", json={"id": "s"})).status_code == 201
            acked: list[dict[str, Any]] = []
            for turn in (1, 2):
                answer = await client.post("/sessions/s/events", json={"events": turn_events(turn)})
                assert answer.status_code == 201, answer.text
                acked.extend(answer.json()["events"])
            before = data_files(data_dir)

            async def every_write_refused(label: str) -> None:
                answers = [
                    await client.post("/sessions/s/events", json={"events": turn_events(3), "expectedSeq": len(acked)}),
                    await client.post("/sessions/s/events", json={"events": turn_events(3)[:2]}),
                    await client.post("/sessions", json={"id": "new", "seed": turn_events(1)}),
                    await client.post("/sessions", json={}),
                    await client.post("/sessions/s/fork", json={"sessionId": "child"}),
                    await client.post("/sessions/s/fork", json={"atSeq": len(acked) - 1}),
                ]
                for answer in answers:
                    assert_no_forbidden_5xx(answer)
                    assert problem_code(answer) == "STORAGE_UNAVAILABLE", (label, answer.text)
                # Nothing changed: not in memory, not on disk (a half-written append was cut back).
                session = (await client.get("/sessions/s")).json()
                assert session["eventCount"] == len(acked), label
                assert (await client.get("/sessions/s/events")).json()["events"] == acked, label
                assert (await client.get("/sessions/new")).status_code == 404, label
                assert (await client.get("/sessions/child")).status_code == 404, label
                assert data_files(data_dir) == before, label
                # Reads and the other answers are as usual.
                assert (await client.get("/sessions/s/history")).status_code == 200
                assert (await client.get("/readyz")).status_code == 200

            disk.failing = True
            disk.half_write_first = True
            await every_write_refused("ENOSPC, the first write half done")
            disk.error = errno.EDQUOT
            await every_write_refused("EDQUOT")
            disk.sync_fails = True
            await every_write_refused("fsync EIO")
            assert disk.refused >= 18

            disk.failing = False
            retried = await client.post(
                "/sessions/s/events", json={"events": turn_events(3), "expectedSeq": len(acked)}
            )
            assert retried.status_code == 201, retried.text
            assert retried.json()["events"][0]["seq"] == len(acked)
            acked.extend(retried.json()["events"])
            assert (await client.post("/sessions/s/fork", json={"sessionId": "child"})).status_code == 201
            assert (await client.post("/sessions", json={"id": "new", "seed": turn_events(1)})).status_code == 201
            assert (await client.get("/sessions/s/events")).json()["events"] == acked


def test_writes_refused_for_a_while_answer_503_and_lose_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    disk = FailingDisk(data_dir)
    asyncio.run(_in_process(data_dir, disk))

    # Reopened from disk (as after a restart): every session whole, none corrupt.
    async def reopen() -> None:
        reopened = FileBackend(data_dir, clock=wall_clock_ms, compression="none")
        try:
            await reopened.open()
            assert reopened.corrupt == []
            listed = await reopened.page(DEFAULT_TENANT, PageRequest(10))
            assert sorted(session.id for session in listed) == ["child", "new", "s"]
            for session_id in ("s", "child"):
                found = await reopened.find(SessionKey(DEFAULT_TENANT, session_id))
                assert found is not None and found.head.count == 3 * len(turn_events(1))
        finally:
            await reopened.close()

    asyncio.run(reopen())
