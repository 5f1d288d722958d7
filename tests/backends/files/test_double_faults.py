"""A refused append whose roll back also fails: the session refuses appends until the cut succeeds, and no restart
(after a crash or a clean shutdown) brings the refused events back.

The faults come through the file backend's OS seam: ``fdatasync`` fails with EIO, so the batch's lines are whole in
the file but never acknowledged, and ``ftruncate`` fails with EIO, so they cannot be cut away at once.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.backends.errors import StorageUnavailable
from tests.backends.files import builders as b
from tests.backends.files.conftest import REPO, OpenStore, session_file
from tests.backends.files.faulty_ops import FaultyFileOps

FIRST_TURN_EVENTS = 11


def fail_eio(*args: Any) -> Any:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def break_sync_and_truncate(ops: FaultyFileOps) -> None:
    ops.fault("fdatasync", fail_eio)
    ops.fault("syncfs", fail_eio)
    ops.fault("ftruncate", fail_eio)


def heal(ops: FaultyFileOps) -> None:
    for name in ("fdatasync", "syncfs", "ftruncate"):
        ops.heal(name)


def check_second_life_has_only_the_acknowledged_turn(data_dir: Path, open_store: OpenStore) -> None:
    async def second_life() -> None:
        store = await open_store(data_dir)
        assert store.corrupt == []
        session = store.get("s")
        assert len(session.log) == FIRST_TURN_EVENTS, "the refused events came back"
        assert b"turn 2" not in session_file(data_dir, "s").read_bytes()
        stored, _, view = await store.append("s", b.full_turn(2))
        assert stored[0]["seq"] == FIRST_TURN_EVENTS
        assert view.head.count == 2 * FIRST_TURN_EVENTS
        await store.close()

    asyncio.run(second_life())
    assert not (data_dir / "index" / "s.cut").exists(), "the cut record outlived its cut"


def test_the_session_refuses_appends_until_the_cut_succeeds_and_a_clean_restart_drops_the_refused_events(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    async def first_life() -> None:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        break_sync_and_truncate(fake_os)
        with pytest.raises(StorageUnavailable):
            await store.append("s", b.full_turn(2))
        assert b"turn 2" in session_file(data_dir, "s").read_bytes(), "the fault did not leave the refused lines"
        assert len(store.get("s").log) == FIRST_TURN_EVENTS
        # While the refused bytes cannot be cut away, nothing is written after them.
        fake_os.fault("fdatasync", os.fdatasync)
        fake_os.fault("syncfs", lambda fd: os.sync())
        with pytest.raises(StorageUnavailable):
            await store.append("s", b.full_turn(2))
        assert (data_dir / "index" / "s.cut").exists()
        await store.close()  # a clean shutdown whose last attempt at the cut fails too
        heal(fake_os)

    asyncio.run(first_life())
    check_second_life_has_only_the_acknowledged_turn(data_dir, open_store)


def test_once_the_cut_succeeds_appends_go_on_and_nothing_is_cut_at_the_next_start(
    data_dir: Path, open_store: OpenStore, fake_os: FaultyFileOps
) -> None:
    async def first_life() -> bytes:
        store = await open_store(data_dir)
        await store.create("s", b.turns(1, 1), None)
        break_sync_and_truncate(fake_os)
        with pytest.raises(StorageUnavailable):
            await store.append("s", b.full_turn(2))
        heal(fake_os)
        stored, _, _ = await store.append("s", b.full_turn(2, "again"))
        assert stored[0]["seq"] == FIRST_TURN_EVENTS
        assert not (data_dir / "index" / "s.cut").exists()
        lines = store.get("s").log.lines()
        await store.close()
        return lines

    lines = asyncio.run(first_life())

    async def second_life() -> None:
        store = await open_store(data_dir)
        assert store.get("s").log.lines() == lines, "an acknowledged append was cut away"
        await store.close()

    asyncio.run(second_life())


CHILD = r"""
import asyncio, errno, os, sys, time

sys.path.insert(0, sys.argv[1])
from app.backends.errors import StorageUnavailable
from tests.backends.files import builders as b
from tests.backends.files.conftest import FileStore
from tests.backends.files.faulty_ops import FaultyFileOps


def eio(*args):
    raise OSError(errno.EIO, os.strerror(errno.EIO))


async def main():
    ops = FaultyFileOps()
    store = await FileStore(sys.argv[2], ops).open()
    await store.create("s", b.turns(1, 1), None)
    for name in ("fdatasync", "syncfs", "ftruncate"):
        ops.fault(name, eio)
    try:
        await store.append("s", b.full_turn(2))
    except StorageUnavailable:
        print("refused", flush=True)
    time.sleep(60)


asyncio.run(main())
"""


def test_a_crash_after_the_double_fault_does_not_resurrect_the_refused_events(
    data_dir: Path, open_store: OpenStore
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(REPO), str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "refused"
            assert b"turn 2" in session_file(data_dir, "s").read_bytes()
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(10)
    check_second_life_has_only_the_acknowledged_turn(data_dir, open_store)
