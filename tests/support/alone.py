"""Tests marked ``alone`` run while no other test runs, also under pytest-xdist (``make test`` runs workers side by
side): a test that compares two timings of its own would otherwise measure how busy the other workers keep the CPU.

Two file locks in the run's shared temporary folder do it. Every test passes the ``gate`` (taken and let go at once)
and then holds the ``room`` shared while it runs; an ``alone`` test holds the gate while it waits for the room to
empty and then holds the room exclusively: the other workers wait at the gate, and cannot keep taking the room in
turns while it waits. Without xdist every test runs alone anyway, and nothing is locked.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

MARKER = "alone"
MARKER_HELP = f"{MARKER}: runs while no other test runs, in any xdist worker (a test that compares timings)"


def shared_folder(config: pytest.Config) -> Path | None:
    """The temporary folder every worker of this run shares (a worker's ``--basetemp`` is a folder in it), or None
    outside xdist."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return None
    basetemp: str | None = config.option.basetemp
    return Path(basetemp).parent if basetemp is not None else None


@contextmanager
def _locked(path: Path, operation: int) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, operation)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def turn_of(item: pytest.Item) -> Iterator[None]:
    """Holds what ``item`` needs to run: the room shared, or (``alone``) the gate and the room exclusively."""
    folder = shared_folder(item.config)
    if folder is None:
        yield
        return
    gate, room = folder / "alone.gate", folder / "alone.room"
    with ExitStack() as held:
        if item.get_closest_marker(MARKER) is not None:
            held.enter_context(_locked(gate, fcntl.LOCK_EX))
            held.enter_context(_locked(room, fcntl.LOCK_EX))
        else:
            with _locked(gate, fcntl.LOCK_EX):
                held.enter_context(_locked(room, fcntl.LOCK_SH))
        yield
