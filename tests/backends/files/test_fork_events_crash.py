"""A fork with events on the file backend (spec 12): the child's file holds its seed and its events before it is
linked in place, so a crash at any moment leaves the child whole or absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.backends.base import SeedLog
from app.backends.files import FileBackend
from app.domain.clock import wall_clock_ms
from app.domain.ids import new_instance
from app.domain.listing import PageRequest
from app.domain.log import seed_log
from app.domain.session import SessionKey
from tests.backends.files.faulty_ops import FaultyFileOps
from tests.backends.test_contract import NOW, seed_with, turn

pytestmark = pytest.mark.anyio


class Crash(BaseException):
    """The process dies here (nothing after it runs, as with kill -9)."""


async def _fork_with_events(backend: FileBackend) -> None:
    seed = await seed_with(backend, "src", 8, turn(2, "edited"))
    await backend.create(SessionKey("default", "kid"), new_instance(), {"parent_session": "src"}, seed)


async def test_a_crash_before_the_child_is_linked_leaves_no_child(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    backend = FileBackend(
        tmp_path, clock=wall_clock_ms, sync=False, ops=ops, checkpoint_interval=None, compression="none"
    )
    await backend.open()
    log = seed_log(turn(1), now=NOW)
    await backend.create(SessionKey("default", "src"), new_instance(), {}, SeedLog(log))
    seen: dict[str, Any] = {}

    def crash(source: Path, target: Path) -> None:
        seen["lines"] = Path(source).read_bytes().splitlines()
        raise Crash()

    ops.fault("link", crash)
    with pytest.raises(Crash):
        await _fork_with_events(backend)
    # Just before it would have become visible, the child's file held its header, the seed and the events.
    assert len(seen["lines"]) == 1 + 8 + 8 and b"edited 2" in seen["lines"][10]
    await backend.close(checkpoint=False)

    reopened = FileBackend(tmp_path, clock=wall_clock_ms, sync=False, checkpoint_interval=None, compression="none")
    await reopened.open()
    try:
        assert await reopened.find(SessionKey("default", "kid")) is None
        assert [s.id for s in await reopened.page("default", PageRequest(10))] == ["src"]
        await _fork_with_events(reopened)  # the id is free, and the fork is whole
        kid = await reopened.find(SessionKey("default", "kid"))
        assert kid is not None and kid.head.count == 16
    finally:
        await reopened.close()
