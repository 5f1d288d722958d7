"""The durable file backend: one DSH-format JSONL file per session in a data directory.

Layout::

    <data-dir>/forklog.lock          held (flock) by the one process that owns the directory
    <data-dir>/sessions/<id>.jsonl   one file per live (or corrupt) session
    <data-dir>/tmp/                  files being created; linked into sessions/ once whole and fsynced

Every change is durable before it is acknowledged. Appends go through one writer thread that takes every append
queued while the previous batch was syncing, writes them all and then syncs each touched file once (group commit),
so the event loop never waits on the disk and concurrent appenders share the cost of the sync.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import fcntl
import logging
import os
import platform
import re
import shutil
import sys
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from app.domain.store import ID_PATTERN, Session, SessionHeader, check_id, wall_clock_ms
from app.persistence.codec import encode_header
from app.persistence.errors import DataDirLocked, StorageUnavailable
from app.persistence.index import SUFFIX as INDEX_SUFFIX
from app.persistence.index import read_index, write_index
from app.persistence.recovery import CorruptLog, Recovered, recover_session

log = logging.getLogger("forklog.storage")

SUFFIX = ".jsonl"
SYNCS_IN_PARALLEL = 16


@dataclass(frozen=True, slots=True)
class CorruptFile:
    id: str
    path: str
    reason: str
    names_session: bool = True  # False for a stray file whose name is not <valid id>.jsonl: no id is refused
    created_at: int | None = None  # from its header, when whole: later creates still sort after it


@dataclass(slots=True)
class Recovery:
    sessions: list[Recovered] = field(default_factory=list)
    corrupt: list[CorruptFile] = field(default_factory=list)


class AlreadyOnDisk(Exception):
    """A create found a file of that id already in place (nothing was overwritten)."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@dataclass(slots=True)
class _Append:
    path: Path
    data: bytes
    done: Callable[[BaseException | None], None]
    fd: int = -1
    size_before: int = -1  # known once the file is open and measured; nothing is written before that
    error: BaseException | None = None
    answered: bool = False


def _syncfs() -> Callable[[int], None] | None:
    """syncfs(2), where it reports write errors (Linux 5.8 and later); None elsewhere."""
    release = re.match(r"(\d+)\.(\d+)", platform.release())
    if not sys.platform.startswith("linux") or release is None or (int(release[1]), int(release[2])) < (5, 8):
        return None
    function = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    if function is None:
        return None

    def syncfs(fd: int) -> None:
        if function(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    return syncfs


sync_file_system = _syncfs()


def _sync_data(item: _Append) -> None:
    try:
        os.fdatasync(item.fd)
    except OSError as exc:
        item.error = exc


class _GroupCommitter:
    """One writer thread: drain the queue, write every append, sync each touched file once, answer them all."""

    def __init__(self, *, sync: bool) -> None:
        self._sync = sync
        # The files of one group are synced at the same time: a device takes them together far faster than one
        # after another (fdatasync releases the GIL).
        self._syncers = ThreadPoolExecutor(max_workers=SYNCS_IN_PARALLEL, thread_name_prefix="forklog-sync")
        self._queue: list[_Append] = []
        # A file whose failed append could not be cut back: the size to cut it to before its next append.
        self._unclean: dict[Path, int] = {}
        self._unclean_lock = threading.Lock()
        self._wakeup = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="forklog-group-commit", daemon=True)
        self._thread.start()

    def submit(self, item: _Append) -> None:
        with self._wakeup:
            if self._closed or not self._thread.is_alive():
                raise StorageUnavailable("the storage is shutting down")
            self._queue.append(item)
            self._wakeup.notify()

    def forget(self, path: Path) -> None:
        """The file at ``path`` was removed or made anew: nothing is left to cut from it."""
        with self._unclean_lock:
            self._unclean.pop(path, None)

    def close(self) -> None:
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
        self._thread.join()
        self._syncers.shutdown(wait=True)

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not self._queue and not self._closed:
                    self._wakeup.wait()
                if not self._queue and self._closed:
                    return
                batch, self._queue = self._queue, []
            try:
                self._commit(batch)
            except BaseException as exc:  # a bug: still answer every append (as failed) and keep the writer alive
                log.exception("the group commit failed")
                for item in batch:
                    if not item.answered:
                        item.answered = True
                        with contextlib.suppress(Exception):
                            item.done(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))

    def _commit(self, batch: list[_Append]) -> None:
        for item in batch:
            try:
                item.fd = os.open(item.path, os.O_WRONLY | os.O_APPEND)
                with self._unclean_lock:
                    clean_size = self._unclean.get(item.path)
                if clean_size is not None:  # cut away what a failed append left before writing after it
                    os.ftruncate(item.fd, clean_size)
                    os.fsync(item.fd)
                    self.forget(item.path)
                item.size_before = os.fstat(item.fd).st_size
                _write_all(item.fd, item.data)
            except OSError as exc:
                item.error = exc
        if self._sync:
            written = [item for item in batch if item.error is None]
            if len(written) == 1:
                _sync_data(written[0])
            elif written and sync_file_system is not None:
                # One syncfs commits every file of the group in one journal transaction: several times faster
                # than a sync per file, even in parallel. An error fails the whole group (nothing is acknowledged).
                try:
                    sync_file_system(written[0].fd)
                except OSError as exc:
                    for item in written:
                        item.error = exc
            elif written:
                for _ in self._syncers.map(_sync_data, written):
                    pass
        for item in batch:
            if item.error is not None and item.size_before >= 0:
                self._roll_back(item)
            if item.fd >= 0:
                try:
                    os.close(item.fd)
                except OSError:  # the data was synced (or the error is already the answer): closing changes nothing
                    log.warning("could not close %s after an append", item.path)
            item.answered = True
            try:
                item.done(item.error)
            except Exception:  # e.g. the event loop closed: the writer must live on for the others
                log.exception("could not answer an append to %s", item.path)

    def _roll_back(self, item: _Append) -> None:
        # A retry must not find half a batch on disk: cut the file back to what was acknowledged.
        try:
            os.ftruncate(item.fd, item.size_before)
            os.fsync(item.fd)
        except OSError:
            # Never write after bytes nobody acknowledged: the next append to this file cuts them first (or fails).
            with self._unclean_lock:
                self._unclean.setdefault(item.path, item.size_before)
            log.exception("could not roll back a failed append to %s", item.path)


class FileJournal:
    """Session files in ``data_dir``; the process holds the directory's lock from construction to :meth:`close`."""

    def __init__(self, data_dir: Path | str, *, sync: bool = True) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.sessions_dir = self.data_dir / "sessions"
        self.tmp_dir = self.data_dir / "tmp"
        self.index_dir = self.data_dir / "index"
        self._sync = sync
        try:
            for folder in (self.data_dir, self.sessions_dir, self.tmp_dir, self.index_dir):
                folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageUnavailable(f"cannot create the data directory {self.data_dir}: {exc.strerror}") from exc
        if sync:
            # New folders are durable only once their parents' entries are: sync them before any session is made.
            for folder in (self.data_dir.parent, self.data_dir):
                with contextlib.suppress(OSError):  # a parent we may not open: then nothing more can be done
                    _fsync_dir(folder)
        self._lock_fd = self._lock()
        self._committer = _GroupCommitter(sync=sync)

    def _lock(self) -> int:
        path = self.data_dir / "forklog.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataDirLocked(
                    f"the data directory {self.data_dir} is in use by another forklog process (pid {owner})"
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def close(self) -> None:
        self._committer.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def path_for(self, session_id: str) -> Path:
        # The id rule admits no separator and no leading dot: a checked id never leaves sessions/.
        return self.sessions_dir / f"{check_id(session_id)}{SUFFIX}"

    # -- create --------------------------------------------------------------------------------------------------

    def create_sync(self, header: SessionHeader, lines: bytes | memoryview) -> None:
        """Write header + lines to a temp file, sync it, link it in place (never overwriting), sync the folder."""
        final = self.path_for(header.id)
        self._committer.forget(final)
        tmp = self.tmp_dir / f"{header.id}.{uuid.uuid4().hex[:12]}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            try:
                _write_all(fd, encode_header(header.record()))
                _write_all(fd, lines)
                if self._sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, final)
            except FileExistsError:
                raise AlreadyOnDisk(str(final)) from None
            if self._sync:
                try:
                    _fsync_dir(self.sessions_dir)
                except OSError:
                    # Not acknowledged, so not created: the id must be free on disk as it is in memory.
                    with contextlib.suppress(OSError):
                        os.unlink(final)
                    raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    async def create(self, header: SessionHeader, lines: bytes | memoryview) -> None:
        try:
            await asyncio.to_thread(self.create_sync, header, lines)
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to create session {header.id!r}: {exc.strerror}") from exc

    # -- append --------------------------------------------------------------------------------------------------

    async def append(self, session_id: str, lines: bytes) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def done(error: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, future, error)

        self._committer.submit(_Append(self.path_for(session_id), lines, done))
        await future

    # -- delete --------------------------------------------------------------------------------------------------

    def delete_sync(self, session_id: str) -> None:
        """Rename the file out of sessions/ (atomic), sync the folder, then unlink it."""
        path = self.path_for(session_id)
        trash = self.tmp_dir / f"{session_id}.{uuid.uuid4().hex[:12]}.deleted"
        os.rename(path, trash)
        self._committer.forget(path)
        if self._sync:
            try:
                _fsync_dir(self.sessions_dir)
            except OSError:
                os.rename(trash, path)  # not acknowledged: the session keeps its file
                raise
        with contextlib.suppress(OSError):
            os.unlink(trash)  # the delete is durable already; recover() sweeps a leftover

    async def delete(self, session_id: str) -> None:
        try:
            await asyncio.to_thread(self.delete_sync, session_id)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to delete session {session_id!r}: {exc.strerror}") from exc

    # -- recovery ------------------------------------------------------------------------------------------------

    def recover(self) -> Recovery:
        """Every session file, rebuilt; a torn tail is truncated away, any other damage is reported and left alone."""
        for leftover in self.tmp_dir.iterdir():
            # A create or delete that crashed half-way: the file was never linked in, or was already unlinked.
            _remove_quietly(leftover)
        recovery = Recovery()
        now = wall_clock_ms()
        indexes = {path.name[: -len(INDEX_SUFFIX)]: path for path in self.index_dir.glob(f"*{INDEX_SUFFIX}")}
        for path in sorted(self.sessions_dir.iterdir()):
            name = path.name
            session_id = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
            if not name.endswith(SUFFIX) or ID_PATTERN.fullmatch(session_id) is None:
                recovery.corrupt.append(
                    CorruptFile(session_id, str(path), "the file name is not <valid id>.jsonl", names_session=False)
                )
                continue
            try:
                data = path.read_bytes()
                index_path = indexes.pop(session_id, None)
                index = read_index(index_path) if index_path is not None else None
                recovered = recover_session(session_id, data, now=now, index=index)
            except CorruptLog as exc:
                log.error("session %s is corrupt and kept out of service: %s", session_id, exc.reason)
                recovery.corrupt.append(CorruptFile(session_id, str(path), exc.reason, created_at=exc.created_at))
                continue
            except OSError as exc:
                recovery.corrupt.append(CorruptFile(session_id, str(path), f"unreadable: {exc.strerror}"))
                continue
            if recovered.torn_bytes:
                log.warning("session %s: dropped a torn last line of %d bytes", session_id, recovered.torn_bytes)
                try:
                    with open(path, "r+b") as handle:
                        handle.truncate(recovered.committed_bytes)
                        if self._sync:
                            os.fsync(handle.fileno())
                except OSError as exc:  # appending after the torn bytes would damage the log: keep it out
                    reason = f"a torn last line could not be cut away: {exc.strerror}"
                    log.error("session %s is kept out of service: %s", session_id, reason)
                    created_at = recovered.session.header.created_at
                    recovery.corrupt.append(CorruptFile(session_id, str(path), reason, created_at=created_at))
                    continue
            recovery.sessions.append(recovered)
        for orphan in [*indexes.values(), *self.index_dir.glob(".*.tmp")]:  # of deleted sessions, or half-written
            _remove_quietly(orphan)
        return recovery

    def save_indexes(self, sessions: Iterable[Session]) -> None:
        """Index every session (at a clean shutdown) so that the next start resumes instead of checking again."""
        for session in sessions:
            try:
                write_index(self.index_dir, session.id, session.log, sync=self._sync)
            except OSError as exc:  # an index only makes a start faster: without it the next start checks all
                log.warning("could not write the index of session %s: %s", session.id, exc.strerror)


def _remove_quietly(path: Path) -> None:
    """Remove a leftover file or folder; one that resists is logged and left (it is never read)."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not remove the leftover %s: %s", path, exc.strerror)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    elif isinstance(error, OSError):
        future.set_exception(StorageUnavailable(f"the disk refused the write: {error.strerror}"))
    else:
        future.set_exception(error)
