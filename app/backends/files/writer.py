"""The one writer thread of the file backend: appends to session files in rounds, one sync a round.

A round takes every append queued while the previous round was syncing, writes them all, syncs every file it
touched once (one ``syncfs`` for several files, where it reports write errors; else an ``fdatasync`` per file, in
parallel) and then answers them all, with one call into the event loop (a wake-up of the loop, and the GIL taken
back, a round, not an append). So the event loop never waits on the disk, and appends to many sessions share the
cost of a sync. (Appends to one session are batched before they get here, by the service.)

The writer keeps the files it appended to last open (at most ``OPEN_FILES``), with their sizes: a round of appends
to sessions in use costs one write each and the round's sync, not an open, a stat and a close as well. A file
removed or made anew is forgotten (:meth:`AppendWriter.forget`) before anything else happens to its path; its
descriptor is closed by the writer thread itself, so a descriptor it may still hold is never reused under it.

A write or sync that fails is cut back to the size before it, so a retry never finds half a batch in the file. If
that cut fails too, the file is *unclean*: a durable cut record is written (:mod:`app.backends.files.cuts`) and
nothing more is written to the file until the cut succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from app.backends.errors import ChangeRefused
from app.backends.files.cuts import Cut, CutRecords
from app.backends.files.fileops import FileOps
from app.backends.observer import NO_STORAGE_OBSERVER, StorageObserver

__all__ = ["AppendWriter"]

logger = logging.getLogger("forklog.storage")

SYNCS_IN_PARALLEL = 16
OPEN_FILES = 128  # session files kept open between rounds, the most recently appended to


@dataclass(slots=True)
class _OpenFile:
    fd: int
    size: int  # what this process wrote or measured: nothing else writes to a session file while it runs


@dataclass(slots=True)
class _Write:
    path: Path
    data: bytes
    cut_note: Cut  # what to record if this write cannot be cut back (its size is filled in then)
    loop: asyncio.AbstractEventLoop  # where its caller waits on ``answer``
    answer: asyncio.Future[None]
    events: int = 0
    fd: int = -1
    size_before: int = -1  # known once the file is open and measured; nothing is written before that
    error: BaseException | None = None
    answered: bool = False


class AppendWriter:
    def __init__(self, ops: FileOps, cuts: CutRecords, *, sync: bool) -> None:
        self._ops = ops
        self._cuts = cuts
        self._sync = sync
        self.observer: StorageObserver = NO_STORAGE_OBSERVER  # told of each round's events and time
        # The files of one round are synced at the same time: a device takes them together far faster than one
        # after another (fdatasync releases the GIL).
        self._syncers = ThreadPoolExecutor(max_workers=SYNCS_IN_PARALLEL, thread_name_prefix="forklog-sync")
        self._queue: list[_Write] = []
        # Appends of the current step of an event loop, handed to the writer together at its end.
        self._arriving: list[_Write] = []
        self._arriving_lock = threading.Lock()
        self._unclean: dict[Path, Cut] = {}
        self._unclean_lock = threading.Lock()
        self._open: OrderedDict[Path, _OpenFile] = OrderedDict()  # only the writer thread touches it
        self._forgotten: list[Path] = []  # paths to close and drop, from any thread (under self._wakeup)
        self._wakeup = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="forklog-writer", daemon=True)
        self._thread.start()

    async def append(self, path: Path, data: bytes, *, instance: str, cut_record: Path, events: int = 0) -> None:
        """Append ``data`` (``events`` events) to the file at ``path`` durably; the OSError (the file as it was)
        if refused."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if self._closed or not self._thread.is_alive():
            raise ChangeRefused("the store is shutting down")
        with self._arriving_lock:
            self._arriving.append(_Write(path, data, Cut(instance, -1, cut_record), loop, future, events))
            first = len(self._arriving) == 1
        if first:
            loop.call_soon(self._hand_over)
        await future

    def _hand_over(self) -> None:
        """Give the writer the appends of this step of the event loop at once: one wake-up of its thread (and one
        hand-over of the GIL) for all of them, not one an append."""
        with self._arriving_lock:
            arriving, self._arriving = self._arriving, []
        if not arriving:
            return
        with self._wakeup:
            refused = self._closed or not self._thread.is_alive()
            if not refused:
                self._queue.extend(arriving)
                self._wakeup.notify()
        if refused:  # closed since they arrived
            for item in arriving:
                item.error = ChangeRefused("the store is shutting down")
            _answer(arriving)

    def forget(self, path: Path) -> None:
        """The file at ``path`` is about to be, or was, removed or made anew: nothing is left to cut from it, and
        the next append to it opens it again. Called before anything may append to the new file."""
        with self._unclean_lock:
            self._unclean.pop(path, None)
        with self._wakeup:
            self._forgotten.append(path)
            self._wakeup.notify()

    def close(self) -> None:
        self._hand_over()  # appends that arrived in this step of the loop are written, as if handed over already
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        self._thread.join()
        self._syncers.shutdown(wait=True)
        self._close_forgotten()
        while self._open:
            self._close_open(next(iter(self._open)))
        with self._unclean_lock:
            unclean = list(self._unclean.items())
        for path, cut in unclean:  # a last chance; what is left is cut at the next start, from its cut record
            with contextlib.suppress(OSError):
                self._cut_back(path, cut)

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not self._queue and not self._forgotten and not self._closed:
                    self._wakeup.wait()
                if not self._queue and not self._forgotten and self._closed:
                    return
                batch, self._queue = self._queue, []
            try:
                self._close_forgotten()  # at once, even with nothing to write: a deleted file's space comes back
                if batch:
                    self._round(batch)
            except BaseException as exc:  # a bug: still answer every append (as failed) and keep the writer alive
                logger.exception("a writer round failed")
                failed = exc if isinstance(exc, Exception) else RuntimeError(str(exc))
                unanswered = [item for item in batch if not item.answered]
                for item in unanswered:
                    item.error = failed
                with contextlib.suppress(Exception):
                    _answer(unanswered)

    def _round(self, batch: list[_Write]) -> None:
        ops = self._ops
        started = time.perf_counter()
        for item in batch:
            try:
                with self._unclean_lock:
                    cut = self._unclean.get(item.path)
                if cut is not None:  # refused bytes are cut away, durably, before anything is written after them
                    self._cut_back(item.path, cut)
                opened = self._open_file(item.path)
                item.fd, item.size_before = opened.fd, opened.size
                ops.write_all(item.fd, item.data)
                opened.size += len(item.data)
            except OSError as exc:
                item.error = exc
        if self._sync:
            self._sync_round([item for item in batch if item.error is None])
        durable = sum(item.events for item in batch if item.error is None)
        if durable:
            self.observer.synced(durable, time.perf_counter() - started)
        for item in batch:
            if item.error is not None and item.size_before >= 0:
                self._roll_back(item)
            if item.error is not None:
                self._close_open(item.path)  # its size is measured again at the next append
        _answer(batch)

    def _open_file(self, path: Path) -> _OpenFile:
        opened = self._open.get(path)
        if opened is not None:
            self._open.move_to_end(path)
            return opened
        fd = self._ops.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            opened = _OpenFile(fd, self._ops.fstat(fd).st_size)
        except OSError:
            self._ops.close(fd)
            raise
        self._open[path] = opened
        while len(self._open) > OPEN_FILES:
            self._close_open(next(iter(self._open)))
        return opened

    def _close_open(self, path: Path) -> None:
        opened = self._open.pop(path, None)
        if opened is not None:
            try:
                self._ops.close(opened.fd)
            except OSError:  # what it held was synced (or its error is already the answer): closing changes nothing
                logger.warning("could not close %s", path)

    def _close_forgotten(self) -> None:
        with self._wakeup:
            forgotten, self._forgotten = self._forgotten, []
        for path in forgotten:
            self._close_open(path)

    def _sync_round(self, written: list[_Write]) -> None:
        if len(written) == 1:
            self._sync_data(written[0])
        elif written and self._ops.has_syncfs:
            # One syncfs commits every file of the round in one journal transaction: several times faster than a
            # sync per file, even in parallel. An error fails the whole round (nothing is acknowledged).
            try:
                self._ops.syncfs(written[0].fd)
            except OSError as exc:
                for item in written:
                    item.error = exc
        elif written:
            for _ in self._syncers.map(self._sync_data, written):
                pass

    def _sync_data(self, item: _Write) -> None:
        try:
            self._ops.fdatasync(item.fd)
        except OSError as exc:
            item.error = exc

    def _roll_back(self, item: _Write) -> None:
        # A retry must not find half a batch on disk: cut the file back to what was acknowledged.
        try:
            self._ops.ftruncate(item.fd, item.size_before)
            self._ops.fsync(item.fd)
        except OSError:
            logger.exception("could not roll back a failed append to %s", item.path)
            cut = Cut(item.cut_note.instance, item.size_before, item.cut_note.record)
            with self._unclean_lock:
                cut = self._unclean.setdefault(item.path, cut)
            # The refused bytes stay in the file for now: the cut record makes the next start cut them away even if
            # this process never manages to.
            try:
                self._cuts.write(cut)
            except OSError:
                logger.critical(
                    "could not record that %s must be cut back to %d bytes; until it is, the session refuses appends",
                    item.path,
                    cut.size,
                )

    def _cut_back(self, path: Path, cut: Cut) -> None:
        """Cut ``path`` back to its acknowledged size, then drop its cut record; OSError if either fails."""
        fd = self._ops.open(path, os.O_WRONLY)
        try:
            self._ops.ftruncate(fd, cut.size)
            self._ops.fsync(fd)
        finally:
            self._ops.close(fd)
        self._cuts.clear(cut.record)
        self._close_open(path)  # its size changed under the descriptor kept open (called by the writer alone)
        self.forget(path)
        logger.warning("cut %s back to its acknowledged %d bytes", path, cut.size)


def _answer(items: Iterable[_Write]) -> None:
    """Answer ``items`` (from the writer thread): one call into each event loop they wait in."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[None], BaseException | None]]] = {}
    for item in items:
        item.answered = True
        by_loop.setdefault(item.loop, []).append((item.answer, item.error))
    for loop, answers in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, answers)
        except Exception:  # e.g. the event loop closed: the writer must live on for the others
            logger.exception("could not answer %d appends", len(answers))


def _settle(answers: list[tuple[asyncio.Future[None], BaseException | None]]) -> None:
    for future, error in answers:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)  # an OSError is translated by the backend's one translation point
