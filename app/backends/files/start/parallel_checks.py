"""Checking the files no checkpoint covers on every core: a start's full checks, in worker processes.

Every event of a file no checkpoint covers (copied in, restored without its index, written by another program) is
checked against every rule, which is CPU-bound Python: one process checks about one file at a time. A start with
many such bytes hands them to a pool of worker processes instead (started fresh, ``spawn``: the server's threads
are never forked). A worker is sent the files' paths and sizes, reads them, checks them exactly as a start in one
process would (:func:`~app.backends.files.start.log_check.check_log`), and sends back, per file, what the damage is, or
the checkpoint record of the whole log: never its events. The start resumes the log from that record, as after a
clean stop (the record's digests are compared with the bytes the start read itself), and writes the records to the
checkpoint journal before the service is ready.

Below ``start_bytes`` of such files a pool costs more than it saves (each worker imports the checker first), and
the start checks them itself.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import gc
import logging
import multiprocessing
import os
import signal
import sys
from collections import deque
from collections.abc import Iterator
from typing import Generic, TypeVar

from app.backends.files.checkpoints.records import encode_record
from app.backends.files.disk.encoding import Encoding
from app.backends.files.frames.file_text import decode_file
from app.backends.files.start.log_check import CorruptLog, check_log
from app.domain.dsh_frames import DamagedFrames
from app.domain.session import SessionKey

__all__ = ["START_BYTES", "FileTask", "FullChecks", "Verdict", "check_files", "worker_count"]

ZSTD_SUFFIX = Encoding.ZSTD.suffix

# Files adding up to at least this many bytes are checked by worker processes.
START_BYTES = 48 * 1024 * 1024
# A worker is sent files adding up to about this many bytes at a time (small: the workers finish close together).
BATCH_BYTES = 2 * 1024 * 1024
# At most this many workers (the pool's processes each hold a file and its check while it runs).
MAX_WORKERS = 8

# (tenant, session id, path, size): the first ``size`` bytes of the file at ``path`` (what the start read).
FileTask = tuple[str, str, str, int]
# A file's verdict: (checkpoint record of the whole log, its lines when they are not the file's own, or None;
# damage, and the header's createdAt with it, or None).
Verdict = tuple[bytes | None, bytes | None, str | None, int | None]

Context = TypeVar("Context")

logger = logging.getLogger("forklog.storage")


def worker_count() -> int:
    """The cores this process may run on (at most MAX_WORKERS)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def check_files(tasks: list[FileTask], now: int) -> list[Verdict]:
    """In a worker: each file's verdict (see :data:`Verdict`)."""
    verdicts: list[Verdict] = []
    for tenant, session_id, path, size in tasks:
        try:
            with open(path, "rb") as file:
                data = file.read(size)
        except OSError as exc:  # the start read it a moment ago: it checks the file itself
            verdicts.append((None, None, f"unreadable: {exc.strerror}", None))
            continue
        if path.endswith(ZSTD_SUFFIX):  # the start found its encoding's: a compressed file is checked as its text
            try:
                data = decode_file(data).text
            except DamagedFrames as exc:
                verdicts.append((None, None, f"damaged zstd frames: {exc}", None))
                continue
        try:
            header, log, mirrored = check_log(session_id, data, now=now)
        except CorruptLog as exc:
            verdicts.append((None, None, exc.reason, exc.created_at))
            continue
        record = b"".join(encode_record(SessionKey(tenant, session_id), header.instance, log.delta()))
        lines = None if mirrored else log.lines()  # packed rows expanded, or lines re-encoded: the log's own
        verdicts.append((record, lines, None, None))
        del data, log
    # (no malloc_trim between batches: the next batch would take the same memory back, page by page, at about a
    # tenth of the check's cost; a worker's memory goes back to the system when the start ends and it exits)
    return verdicts


def _ready() -> None:
    """A worker's first task: it has started (and imported the checker)."""


def _worker_started(start: int) -> None:
    _end_with(start)
    gc.disable()  # a check makes many objects that live until its file is done: collecting only walks them again
    _keep_freed_memory()


_PR_SET_PDEATHSIG = 1  # prctl(2)


def _end_with(start: int) -> None:
    """End this worker when the process of the start (pid ``start``) ends: a start killed, or stopped, while its
    files are checked leaves no worker behind waiting for work, holding its memory. (Linux; elsewhere the pool's
    own shutdown at the end of the start is what ends a worker.)"""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(AttributeError, OSError):  # not glibc
            ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != start:  # the start ended before this worker could ask to end with it
        os._exit(0)


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def _keep_freed_memory() -> None:
    """Keep what a file's check freed for the next file's: glibc's malloc gives a large block (a file read whole)
    back to the system when it is freed, and trims its heap, and the next file takes the same memory back a page
    fault at a time (about a tenth of a worker's time). A worker checks one file after another and exits when the
    start is done, so its peak is what it holds either way."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):  # not glibc
        return
    mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024)  # glibc's largest: a larger file is mapped and unmapped alone
    mallopt(_M_TRIM_THRESHOLD, 1 << 30)


class FullChecks(Generic[Context]):
    """The files a start hands over (:meth:`add`), checked in its own process until they add up to
    ``start_bytes``, then by ``workers`` processes; each verdict comes back with the caller's ``Context``, in the
    order the files were added, from :meth:`add` (those ready) and :meth:`drain` (the rest).

    Until the pool starts, the files are only kept (:meth:`drain` returns them unchecked, verdict None: the caller
    checks them itself); once it has, at most two batches a worker are under way, so that what the start holds of
    files not yet checked stays bounded.
    """

    def __init__(self, *, now: int, workers: int, start_bytes: int = START_BYTES) -> None:
        self._now = now
        self._workers = workers
        self._start_bytes = start_bytes
        self._held: list[tuple[FileTask, Context]] = []
        self._held_bytes = 0
        self._batch: list[tuple[FileTask, Context]] = []
        self._batch_bytes = 0
        self._under_way: deque[tuple[concurrent.futures.Future[list[Verdict]], list[Context]]] = deque()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._failed = False
        self.files = 0  # files checked by the workers

    @property
    def started(self) -> bool:
        return self._pool is not None

    def add(self, task: FileTask, context: Context) -> Iterator[tuple[Context, Verdict | None]]:
        """Hand over one file; yields the verdicts that are ready (of files added earlier, or this one)."""
        if self._failed:
            yield context, None
            return
        if self._pool is None:
            self._held.append((task, context))
            self._held_bytes += task[3]
            if self._held_bytes < self._start_bytes or self._workers < 2:
                return
            held, self._held = self._held, []
            if not self._start_pool():
                for _, held_context in held:
                    yield held_context, None
                return
            for item in held:
                yield from self._batched(*item)
            return
        yield from self._batched(task, context)

    def expect(self, total: int) -> None:
        """The files to be handed over add up to at least ``total`` bytes: with enough of them the workers start
        now, and import the checker while the start reads its first files (instead of once it has read
        ``start_bytes`` of them)."""
        if self._pool is None and not self._failed and total and total >= self._start_bytes and self._workers >= 2:
            self._start_pool()

    def _start_pool(self) -> bool:
        """Start the workers (each one at once, not at its first batch); False if there are no processes to be had
        here (limits, no shared memory): then the start checks every file itself."""
        pool = None
        try:
            pool = concurrent.futures.ProcessPoolExecutor(
                self._workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_started,
                initargs=(os.getpid(),),
            )
            for _ in range(self._workers):  # (a pool starts a process a submitted task, up to its size)
                pool.submit(_ready)
        except Exception:
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            logger.warning("could not start processes to check files; the start checks them itself", exc_info=True)
            self._failed = True
            return False
        self._pool = pool
        return True

    def _batched(self, task: FileTask, context: Context) -> Iterator[tuple[Context, Verdict | None]]:
        self._batch.append((task, context))
        self._batch_bytes += task[3]
        if self._batch_bytes >= BATCH_BYTES:
            self._submit()
        while len(self._under_way) > 2 * self._workers:
            yield from self._oldest()

    def _submit(self) -> None:
        if not self._batch:
            return
        assert self._pool is not None
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        try:
            future = self._pool.submit(check_files, [task for task, _ in batch], self._now)
        except Exception as exc:  # a process that could not start, a pool already broken: handed back unchecked
            future = concurrent.futures.Future()
            future.set_exception(exc)
        self._under_way.append((future, [context for _, context in batch]))

    def _oldest(self) -> Iterator[tuple[Context, Verdict | None]]:
        future, contexts = self._under_way.popleft()
        try:
            verdicts: list[Verdict | None] = list(future.result())
            self.files += len(verdicts)
        except Exception:  # a worker that died (killed, out of memory): the start checks its files itself
            if not self._failed:
                logger.warning("a worker process checking files failed; the start checks them itself", exc_info=True)
            self._failed = True
            verdicts = [None] * len(contexts)
        yield from zip(contexts, verdicts, strict=True)

    def drain(self) -> Iterator[tuple[Context, Verdict | None]]:
        """Every verdict not handed out yet (files held while the pool never started: None), then the pool ends."""
        held, self._held = self._held, []
        for _, context in held:
            yield context, None
        if self._pool is None:
            return
        try:
            self._submit()
            while self._under_way:
                yield from self._oldest()
        finally:
            self.close()

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
