"""Appends to session files: written and made durable in shared rounds, cut back when refused.

The appends that arrive while a round is written and synced wait together for the next one
(:mod:`app.backends.files.appends.rounds`). A round is written and synced by the sync process
(:mod:`app.backends.files.appends.sync_process`), which needs no GIL, where the system has ``syncfs`` and the
:class:`~app.backends.files.disk.fileops.FileOps` syncs as the system does; else by a thread, through the FileOps (a
test's injected faults reach it). A batch over ``INLINE_WRITE_BYTES`` is written by a worker thread before it joins
a round, so that no pipe carries megabytes. Without syncs (``--no-fsync``) the event loop writes each append itself.
Appends to one session are batched before they get here, by the service, and one batch at a time reaches a file:
nothing else writes to a session file meanwhile.

The files appended to last stay open (at most ``OPEN_FILES``), with their sizes: a round of appends to sessions in
use costs its writes and the round's sync, not an open, a stat and a close as well in this process. A file removed
or made anew is forgotten (:meth:`AppendWriter.forget`) before anything else happens to its path.

A write or sync that fails is cut back to the size before it, in a thread, so a retry never finds half a batch in
the file. If that cut fails too, the file is *unclean*: a durable cut record is written
(:mod:`app.backends.files.appends.cuts`) and nothing more is written to the file until the cut succeeds. An append
cancelled once handed over (the service never cancels one but at shutdown) leaves its file unclean too, in memory: the
next append cuts it back first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.backends.errors import ChangeRefused
from app.backends.files.appends.cuts import Cut, CutRecords
from app.backends.files.appends.rounds import SyncRounds
from app.backends.files.appends.sync_process import ProcessSyncer
from app.backends.files.appends.syncers import Syncer, SyncTarget, ThreadSyncer
from app.backends.files.disk.fileops import FileOps
from app.backends.observer import NO_STORAGE_OBSERVER, StorageObserver

__all__ = ["INLINE_WRITE_BYTES", "OPEN_FILES", "AppendWriter"]

logger = logging.getLogger("forklog.storage")

OPEN_FILES = 128  # session files kept open between appends, the most recently appended to
INLINE_WRITE_BYTES = 64 * 1024  # larger batches are written by a worker thread before their round


@dataclass(slots=True)
class _OpenFile:
    target: SyncTarget
    size: int  # what this process wrote or measured: nothing else writes to a session file while it runs


class AppendWriter:
    def __init__(
        self,
        ops: FileOps,
        cuts: CutRecords,
        *,
        sync: bool,
        folder: Path | None = None,
        syncer: Syncer | None = None,
    ) -> None:
        """``folder``: the data directory, whose file system the sync process syncs (without it, syncs run in a
        thread); ``syncer`` replaces the one chosen (a test's)."""
        self._ops = ops
        self._cuts = cuts
        self.observer: StorageObserver = NO_STORAGE_OBSERVER  # told of each round's events and time
        self._rounds = SyncRounds(syncer or _syncer_for(ops, folder), synced=self._synced) if sync else None
        # Forgetting comes from worker threads (a create or a delete): the open files and the unclean ones are
        # shared with them.
        self._lock = threading.Lock()
        self._open: OrderedDict[Path, _OpenFile] = OrderedDict()
        self._unclean: dict[Path, Cut] = {}
        self._threads: dict[Path, asyncio.Future[None]] = {}  # writes and cuts running in a worker thread
        self._appending: set[Path] = set()  # files an append is using, from its open to its end
        self._closed = False

    async def append(self, path: Path, data: bytes, *, instance: str, cut_record: Path, events: int = 0) -> None:
        """Append ``data`` (``events`` events) to the file at ``path`` durably; the OSError (the file as it was)
        if refused."""
        if self._closed:
            raise ChangeRefused("the store is shutting down")
        # Both are empty but after a cancelled or failed append: looked into only then.
        if self._threads:
            await self._settled(path)
        cut = None
        if self._unclean:
            with self._lock:
                cut = self._unclean.get(path)
        if cut is not None:  # refused bytes are cut away, durably, before anything is written after them
            await self._released(path)
            await self._in_thread(path, self._cut_back, path, cut)
        self._appending.add(path)
        try:
            await self._write(path, data, instance=instance, cut_record=cut_record, events=events)
        finally:
            self._appending.discard(path)
            self._trim_open()

    async def _write(self, path: Path, data: bytes, *, instance: str, cut_record: Path, events: int) -> None:
        started = time.perf_counter()
        opened = self._opened(path)
        before = opened.size
        try:
            lines = data
            if len(data) > INLINE_WRITE_BYTES:  # the rounds' pipe and the loop carry no megabytes
                await self._in_thread(path, self._ops.write_all, opened.target.fd, data)
                lines = b""
            opened.size += len(data)
            if self._rounds is not None:
                await self._rounds.durable(opened.target, lines, events)
            else:
                self._ops.write_all(opened.target.fd, lines)
                if events:
                    self.observer.synced(events, time.perf_counter() - started)
        except OSError:
            # A write that failed may have written part of the batch; a sync that failed leaves it all unsure.
            await self._in_thread(path, self._roll_back, path, opened, Cut(instance, before, cut_record))
            raise
        except BaseException:
            # Cancelled (at shutdown) once handed over, part of the lines may be in the file: nothing was
            # acknowledged, the next append cuts it back (once no round or thread uses the descriptor any more).
            with self._lock:
                self._unclean.setdefault(path, Cut(instance, before, cut_record))
            raise

    def prepare(self) -> None:
        """Start what the rounds need (the sync process) now, in the running event loop, rather than at the first
        append, which would wait for it."""
        if self._rounds is not None:
            self._rounds.prepare()

    def is_clean(self, path: Path) -> bool:
        """Whether nothing refused may be left in the file at ``path`` (no cut is owed to it, no thread writes it)."""
        with self._lock:
            return path not in self._unclean and path not in self._threads

    def forget(self, path: Path) -> None:
        """The file at ``path`` is about to be, or was, removed or made anew: nothing is left to cut from it, and
        the next append to it opens it again. Called before anything may append to the new file."""
        with self._lock:
            self._unclean.pop(path, None)
        self._close_open(path)

    async def close(self) -> None:
        """Wait for the rounds under way, then close every file; a last chance to cut back an unclean one."""
        self._closed = True
        if self._rounds is not None:
            await self._rounds.idle()
        for running in list(self._threads.values()):
            with contextlib.suppress(BaseException):
                await running
        if self._rounds is not None:
            self._rounds.close()
        while self._open:
            self._close_open(next(iter(self._open)))
        with self._lock:
            unclean = list(self._unclean.items())
        for path, cut in unclean:  # what is left is cut at the next start, from its cut record
            with contextlib.suppress(OSError):
                self._cut_back(path, cut)

    # -- files -----------------------------------------------------------------------------------------------------

    def _opened(self, path: Path) -> _OpenFile:
        with self._lock:
            opened = self._open.get(path)
            if opened is not None:
                self._open.move_to_end(path)
                return opened
        fd = self._ops.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            status = self._ops.fstat(fd)
        except OSError:
            self._ops.close(fd)
            raise
        opened = _OpenFile(SyncTarget(fd, status.st_dev, path, status.st_ino), status.st_size)
        with self._lock:
            self._open[path] = opened
        return opened

    def _trim_open(self) -> None:
        """Close the files used longest ago past ``OPEN_FILES``, but those an append, a round or a thread still uses
        (they go at the end of a later append)."""
        if len(self._open) <= OPEN_FILES:
            return
        evicted: list[Path] = []
        with self._lock:
            extra = len(self._open) - OPEN_FILES
            for path, kept in self._open.items():
                if len(evicted) == extra:
                    break
                if not self._in_use(path, kept):
                    evicted.append(path)
        for path in evicted:
            self._close_open(path)

    def _in_use(self, path: Path, opened: _OpenFile) -> bool:
        """Whether the file's descriptor may not be closed yet: an append, a round or a thread still uses it."""
        return (
            path in self._appending
            or path in self._threads
            or (self._rounds is not None and self._rounds.busy_with(opened.target.fd))
        )

    def _close_open(self, path: Path) -> None:
        with self._lock:
            opened = self._open.pop(path, None)
        if opened is not None:
            try:
                self._ops.close(opened.target.fd)
            except OSError:  # what it held was synced (or its error is already the answer): closing changes nothing
                logger.warning("could not close %s", path)

    async def _settled(self, path: Path) -> None:
        """Wait for a worker thread still writing or cutting ``path`` (an append cancelled while it ran)."""
        running = self._threads.get(path)
        if running is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(running)

    async def _released(self, path: Path) -> None:
        """Wait until no round holds the descriptor of ``path`` (one an append cancelled while it waited left)."""
        opened = self._open.get(path)
        while opened is not None and self._rounds is not None and self._rounds.busy_with(opened.target.fd):
            await asyncio.sleep(0.001)  # rare: an append cancelled at shutdown, then another to the same session

    async def _in_thread(self, path: Path, function: Callable[..., None], *args: object) -> None:
        """Run ``function(*args)`` in a worker thread, noted as working on ``path`` until it is done, even if the
        append waiting on it is cancelled."""
        running: asyncio.Future[None] = asyncio.ensure_future(asyncio.to_thread(function, *args))
        self._threads[path] = running

        def done(_: object) -> None:
            if self._threads.get(path) is running:
                del self._threads[path]

        running.add_done_callback(done)
        await asyncio.shield(running)

    # -- rounds ----------------------------------------------------------------------------------------------------

    def _synced(self, events: int, seconds: float) -> None:
        self.observer.synced(events, seconds)

    # -- cutting back (in a worker thread) ---------------------------------------------------------------------------

    def _roll_back(self, path: Path, opened: _OpenFile, cut: Cut) -> None:
        # A retry must not find half a batch on disk: cut the file back to what was acknowledged.
        try:
            self._ops.ftruncate(opened.target.fd, cut.size)
            self._ops.fsync(opened.target.fd)
        except OSError:
            logger.exception("could not roll back a failed append to %s", path)
            with self._lock:
                cut = self._unclean.setdefault(path, cut)
            # The refused bytes stay in the file for now: the cut record makes the next start cut them away even if
            # this process never manages to.
            try:
                self._cuts.write(cut)
            except OSError:
                logger.critical(
                    "could not record that %s must be cut back to %d bytes; until it is, the session refuses appends",
                    path,
                    cut.size,
                )
        finally:
            self._close_open(path)  # its size is measured again at the next append

    def _cut_back(self, path: Path, cut: Cut) -> None:
        """Cut ``path`` back to its acknowledged size, then drop its cut record; OSError if either fails."""
        fd = self._ops.open(path, os.O_WRONLY)
        try:
            self._ops.ftruncate(fd, cut.size)
            self._ops.fsync(fd)
        finally:
            self._ops.close(fd)
        self._cuts.clear(cut.record)
        self.forget(path)  # its size changed under the descriptor kept open
        logger.warning("cut %s back to its acknowledged %d bytes", path, cut.size)


def _syncer_for(ops: FileOps, folder: Path | None) -> Syncer:
    """The sync process where it can serve (see the module's docstring), else a thread."""
    in_thread = ThreadSyncer(ops)
    if folder is None or not ops.syncs_natively:
        return in_thread
    return ProcessSyncer(folder, fallback=in_thread)
