"""Who syncs a round of appends (:mod:`app.backends.files.sync_rounds`): a :class:`Syncer` makes the files of a round
durable and says so in the event loop.

:class:`ThreadSyncer` makes the calls of :class:`~app.backends.files.fileops.FileOps` in a worker thread: one
``fdatasync`` for a round of one file; for several one ``syncfs`` where it reports write errors, else an
``fdatasync`` per file, in parallel. It is what a FileOps whose sync calls are its own (a test's faults) gets, and
what the sync process (:mod:`app.backends.files.sync_process`) falls back on where it cannot serve.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.backends.files.fileops import FileOps

__all__ = ["SYNCS_IN_PARALLEL", "SyncDone", "SyncTarget", "Syncer", "ThreadSyncer"]

SYNCS_IN_PARALLEL = 16


@dataclass(frozen=True, slots=True)
class SyncTarget:
    """A file of a round: its descriptor (open until the round is answered), the device it is on, its path."""

    fd: int
    device: int
    path: Path


# A round's answer: an error for the whole round, or the errors of some of its files by descriptor (both empty: done).
SyncDone = Callable[[OSError | None, dict[int, OSError]], None]


class Syncer(Protocol):
    def start(self, files: list[SyncTarget], done: SyncDone) -> None:
        """Make ``files`` durable, then call ``done`` in the running event loop (one round at a time)."""

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

    def start(self, files: list[SyncTarget], done: SyncDone) -> None:
        loop = asyncio.get_running_loop()
        fds = [target.fd for target in files]

        def answer(future: Future[tuple[OSError | None, dict[int, OSError]]]) -> None:
            error, by_fd = future.result()
            with contextlib.suppress(RuntimeError):  # the event loop closed meanwhile: no one waits any more
                loop.call_soon_threadsafe(done, error, by_fd)

        self._rounds.submit(self._sync, fds).add_done_callback(answer)

    def prepare(self) -> None:
        return None

    def close(self) -> None:
        self._rounds.shutdown(wait=True)
        self._parallel.shutdown(wait=True)

    def _sync(self, fds: list[int]) -> tuple[OSError | None, dict[int, OSError]]:
        try:
            if len(fds) == 1:
                self._ops.fdatasync(fds[0])
            elif self._ops.has_syncfs:
                # One syncfs commits every file of the round in one journal transaction: several times faster than
                # a sync per file, even in parallel. An error fails the whole round (nothing is acknowledged).
                self._ops.syncfs(fds[0])
            else:
                errors = self._parallel.map(self._fdatasync, fds)
                return None, {fd: error for fd, error in zip(fds, errors, strict=True) if error is not None}
        except OSError as exc:
            return exc, {}
        except Exception as exc:  # a bug: the round fails, its appends are cut back and the writer goes on
            return OSError(f"the sync failed: {exc!r}"), {}
        return None, {}

    def _fdatasync(self, fd: int) -> OSError | None:
        try:
            self._ops.fdatasync(fd)
        except OSError as exc:
            return exc
        return None
