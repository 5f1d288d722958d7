"""Who writes and syncs a round of appends (:mod:`app.backends.files.appends.rounds`): a :class:`Syncer` appends each
append's lines to its file, makes the round durable and says so in the event loop.

:class:`ThreadSyncer` makes the calls of :class:`~app.backends.files.disk.fileops.FileOps` in a worker thread: the
writes, then one ``fdatasync`` for a round of one file; for several one ``syncfs`` where it reports write errors,
else an ``fdatasync`` per file, in parallel. It is what a FileOps whose sync calls are its own (a test's faults)
gets, and what the sync process (:mod:`app.backends.files.appends.sync_process`) falls back on where it cannot serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from app.backends.files.disk.fileops import FileOps

__all__ = ["SYNCS_IN_PARALLEL", "RoundAppend", "SyncDone", "SyncTarget", "Syncer", "ThreadSyncer"]

SYNCS_IN_PARALLEL = 16


@dataclass(frozen=True, slots=True)
class SyncTarget:
    """A file of a round: its descriptor (open until the round is answered), the device it is on, its path and its
    inode number (the file the descriptor holds)."""

    fd: int
    device: int
    path: Path
    inode: int
    # The path as the sync process is sent it (once per file, not on every append of a round).
    encoded_path: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "encoded_path", os.fsencode(self.path))


# One append of a round: its file, and the lines the syncer appends to it first (none: written already).
RoundAppend = tuple[SyncTarget, bytes]

# A round's answer: an error for the whole round, or the errors of some of its appends by their place in it (both
# empty: all durable).
SyncDone = Callable[[OSError | None, dict[int, OSError]], None]


class Syncer(Protocol):
    def start(self, appends: list[RoundAppend], done: SyncDone) -> None:
        """Write and sync ``appends``, then call ``done`` in the running event loop (one round at a time)."""

    def prepare(self) -> None:
        """Get ready for a first round soon, in the running event loop."""

    def close(self) -> None:
        """Let go of what it holds; no round is running."""


class ThreadSyncer:
    def __init__(self, ops: FileOps) -> None:
        self._ops = ops
        # The files of one round are synced at the same time: a device takes them together far faster than one
        # after another (fdatasync releases the GIL).
        self._parallel = ThreadPoolExecutor(max_workers=SYNCS_IN_PARALLEL, thread_name_prefix="forklog-sync")
        self._rounds = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forklog-sync-round")

    def start(self, appends: list[RoundAppend], done: SyncDone) -> None:
        loop = asyncio.get_running_loop()

        def answer(future: Future[tuple[OSError | None, dict[int, OSError]]]) -> None:
            error, by_place = future.result()
            with contextlib.suppress(RuntimeError):  # the event loop closed meanwhile: no one waits any more
                loop.call_soon_threadsafe(done, error, by_place)

        self._rounds.submit(self._round, appends).add_done_callback(answer)

    def prepare(self) -> None:
        return None

    def close(self) -> None:
        self._rounds.shutdown(wait=True)
        self._parallel.shutdown(wait=True)

    def _round(self, appends: list[RoundAppend]) -> tuple[OSError | None, dict[int, OSError]]:
        failed: dict[int, OSError] = {}
        try:
            for place, (target, data) in enumerate(appends):
                if data:
                    try:
                        self._ops.write_all(target.fd, data)
                    except OSError as exc:
                        failed[place] = exc
            written = [(place, target.fd) for place, (target, _) in enumerate(appends) if place not in failed]
            if not written:
                return None, failed
            # An append written before its round (maybe while a sync that failed ran: syncfs reports an error once)
            # is synced through its own file as well.
            own = [(place, fd) for place, fd in written if len(appends) == 1 or not appends[place][1]]
            if own or not self._ops.has_syncfs:
                each = own if self._ops.has_syncfs else written
                errors = self._parallel.map(self._fdatasync, [fd for _, fd in each])
                failed.update({place: error for (place, _), error in zip(each, errors, strict=True) if error})
            if len(appends) > 1 and self._ops.has_syncfs:
                # One syncfs commits every file of the round in one journal transaction: several times faster than
                # a sync per file, even in parallel. An error fails the whole round (nothing is acknowledged).
                self._ops.syncfs(written[0][1])
        except OSError as exc:
            if len(appends) == 1:
                return None, {0: exc}
            return exc, failed
        except Exception as exc:  # a bug: the round fails, its appends are cut back and the writer goes on
            return OSError(f"the sync failed: {exc!r}"), failed
        return None, failed

    def _fdatasync(self, fd: int) -> OSError | None:
        try:
            self._ops.fdatasync(fd)
        except OSError as exc:
            return exc
        return None
