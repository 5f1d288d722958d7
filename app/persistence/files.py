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
import errno
import fcntl
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from app.domain.store import ID_PATTERN, Session, SessionHeader, check_id, wall_clock_ms
from app.persistence.codec import encode_header
from app.persistence.errors import DataDirLocked, StorageUnavailable, UnsafeDataDir
from app.persistence.fileops import FileKind, FileOps
from app.persistence.index import SUFFIX as INDEX_SUFFIX
from app.persistence.index import read_index, write_index
from app.persistence.recovery import CorruptLog, Recovered, header_from_record, parse_header, recover_session

log = logging.getLogger("forklog.storage")

SUFFIX = ".jsonl"
CUT_SUFFIX = ".cut"
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


@dataclass(slots=True)
class _Append:
    path: Path
    instance: str
    data: bytes
    done: Callable[[BaseException | None], None]
    fd: int = -1
    size_before: int = -1  # known once the file is open and measured; nothing is written before that
    error: BaseException | None = None
    answered: bool = False


@dataclass(frozen=True, slots=True)
class _Unclean:
    """A file whose failed append could not be cut back: what to cut it to before anything is written after it."""

    instance: str
    size: int


class _GroupCommitter:
    """One writer thread: drain the queue, write every append, sync each touched file once, answer them all."""

    def __init__(self, ops: FileOps, cuts: _CutRecords, *, sync: bool) -> None:
        self._ops = ops
        self._cuts = cuts
        self._sync = sync
        # The files of one group are synced at the same time: a device takes them together far faster than one
        # after another (fdatasync releases the GIL).
        self._syncers = ThreadPoolExecutor(max_workers=SYNCS_IN_PARALLEL, thread_name_prefix="forklog-sync")
        self._queue: list[_Append] = []
        self._unclean: dict[Path, _Unclean] = {}
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
        with self._unclean_lock:
            unclean = list(self._unclean.items())
        for path, cut in unclean:  # a last chance; what is left is cut at the next start, from its cut record
            with contextlib.suppress(OSError):
                self._cut_back(path, cut)

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
        ops = self._ops
        for item in batch:
            try:
                with self._unclean_lock:
                    cut = self._unclean.get(item.path)
                if cut is not None:  # refused bytes are cut away, durably, before anything is written after them
                    self._cut_back(item.path, cut)
                item.fd = ops.open(item.path, os.O_WRONLY | os.O_APPEND)
                item.size_before = ops.fstat(item.fd).st_size
                ops.write_all(item.fd, item.data)
            except OSError as exc:
                item.error = exc
        if self._sync:
            written = [item for item in batch if item.error is None]
            if len(written) == 1:
                self._sync_data(written[0])
            elif written and ops.has_syncfs:
                # One syncfs commits every file of the group in one journal transaction: several times faster
                # than a sync per file, even in parallel. An error fails the whole group (nothing is acknowledged).
                try:
                    ops.syncfs(written[0].fd)
                except OSError as exc:
                    for item in written:
                        item.error = exc
            elif written:
                for _ in self._syncers.map(self._sync_data, written):
                    pass
        for item in batch:
            if item.error is not None and item.size_before >= 0:
                self._roll_back(item)
            if item.fd >= 0:
                try:
                    ops.close(item.fd)
                except OSError:  # the data was synced (or the error is already the answer): closing changes nothing
                    log.warning("could not close %s after an append", item.path)
            item.answered = True
            try:
                item.done(item.error)
            except Exception:  # e.g. the event loop closed: the writer must live on for the others
                log.exception("could not answer an append to %s", item.path)

    def _sync_data(self, item: _Append) -> None:
        try:
            self._ops.fdatasync(item.fd)
        except OSError as exc:
            item.error = exc

    def _roll_back(self, item: _Append) -> None:
        # A retry must not find half a batch on disk: cut the file back to what was acknowledged.
        try:
            self._ops.ftruncate(item.fd, item.size_before)
            self._ops.fsync(item.fd)
        except OSError:
            log.exception("could not roll back a failed append to %s", item.path)
            cut = _Unclean(item.instance, item.size_before)
            with self._unclean_lock:
                cut = self._unclean.setdefault(item.path, cut)
            # The refused bytes stay in the file for now: the cut record makes the next start cut them away even
            # if this process never manages to.
            try:
                self._cuts.record(item.path, cut)
            except OSError:
                log.critical(
                    "could not record that %s must be cut back to %d bytes; until it is, the session refuses appends",
                    item.path,
                    cut.size,
                )

    def _cut_back(self, path: Path, cut: _Unclean) -> None:
        """Cut ``path`` back to its acknowledged size, then drop its cut record; OSError if either fails."""
        fd = self._ops.open(path, os.O_WRONLY)
        try:
            self._ops.ftruncate(fd, cut.size)
            self._ops.fsync(fd)
        finally:
            self._ops.close(fd)
        self._cuts.clear(path)
        self.forget(path)
        log.warning("cut %s back to its acknowledged %d bytes", path, cut.size)


class _CutRecords:
    """Durable notes "this session's file must be cut back to N bytes", kept in ``index/<id>.cut``.

    A failed append whose roll back fails too leaves refused bytes in the file; the note, written and synced at
    once, makes every later start cut them away (when the header's instance still matches), so a restart never
    resurrects them. It is removed, durably, once the cut succeeds.
    """

    def __init__(self, folder: Path, ops: FileOps, *, sync: bool) -> None:
        self._folder = folder
        self._ops = ops
        self._sync = sync

    def path_for(self, session_path: Path) -> Path:
        return self._folder / (session_path.name[: -len(SUFFIX)] + CUT_SUFFIX)

    def record(self, session_path: Path, cut: _Unclean) -> None:
        target = self.path_for(session_path)
        temporary = self._folder / f".{target.name}.{uuid.uuid4().hex[:12]}.tmp"
        fd = self._ops.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                self._ops.write_all(fd, orjson.dumps({"instance": cut.instance, "size": cut.size}))
                if self._sync:
                    self._ops.fsync(fd)
            finally:
                self._ops.close(fd)
            self._ops.replace(temporary, target)
            if self._sync:
                self._ops.fsync_dir(self._folder)
        except BaseException:
            with contextlib.suppress(OSError):
                self._ops.unlink(temporary)
            raise

    def read(self, session_id: str) -> _Unclean | None:
        """The cut noted for ``session_id``, or None (none, or unreadable: then there is nothing safe to cut)."""
        path = self._folder / f"{session_id}{CUT_SUFFIX}"
        try:
            fd = self._ops.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            note = orjson.loads(self._ops.read_all(fd))
            return _Unclean(str(note["instance"]), int(note["size"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.error("the cut record %s cannot be read (%s); it is ignored", path, exc)
            return None
        finally:
            self._ops.close(fd)

    def clear(self, session_path: Path) -> None:
        try:
            self._ops.unlink(self.path_for(session_path))
        except FileNotFoundError:
            return
        if self._sync:
            self._ops.fsync_dir(self._folder)


class FileJournal:
    """Session files in ``data_dir``; the process holds the directory's lock from construction to :meth:`close`.

    ``ops`` is the door to the operating system (tests pass a :class:`FileOps` that injects faults).
    """

    def __init__(self, data_dir: Path | str, *, sync: bool = True, ops: FileOps | None = None) -> None:
        self.ops = ops if ops is not None else FileOps()
        self.data_dir = Path(data_dir).absolute()
        self.sessions_dir = self.data_dir / "sessions"
        self.tmp_dir = self.data_dir / "tmp"
        self.index_dir = self.data_dir / "index"
        self._sync = sync
        try:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageUnavailable(f"cannot create the data directory {self.data_dir}: {exc.strerror}") from exc
        for folder in (self.sessions_dir, self.tmp_dir, self.index_dir):
            self._ensure_folder(folder)
        if sync:
            # New folders are durable only once their parents' entries are: sync them before any session is made.
            for folder in (self.data_dir.parent, self.data_dir):
                with contextlib.suppress(OSError):  # a parent we may not open: then nothing more can be done
                    self.ops.fsync_dir(folder)
        self._lock_fd = self._lock()
        self._cuts = _CutRecords(self.index_dir, self.ops, sync=sync)
        self._committer = _GroupCommitter(self.ops, self._cuts, sync=sync)

    def _ensure_folder(self, folder: Path) -> None:
        """Make ``folder`` if it is missing; refuse one that is a symlink or not a directory."""
        kind = self.ops.kind(folder)
        if kind == FileKind.MISSING:
            try:
                self.ops.mkdir(folder)
            except FileExistsError:
                kind = self.ops.kind(folder)
            except OSError as exc:
                raise StorageUnavailable(f"cannot create {folder}: {exc.strerror}") from exc
            else:
                return
        if kind == FileKind.SYMLINK:
            raise UnsafeDataDir(
                f"{folder} is a symbolic link; forklog never follows one out of its data directory: "
                "replace it with a real directory"
            )
        if kind != FileKind.DIRECTORY:
            raise UnsafeDataDir(f"{folder} is {kind}, not a directory: move it away and start again")

    def _lock(self) -> int:
        path = self.data_dir / "forklog.lock"
        try:
            fd = self.ops.open(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeDataDir(
                    f"{path} is a symbolic link; forklog never follows one: remove it and start again"
                ) from None
            raise StorageUnavailable(f"cannot open {path}: {exc.strerror}") from exc
        try:
            if self.ops.kind(path) != FileKind.REGULAR:
                raise UnsafeDataDir(f"{path} is not a regular file: remove it and start again")
            self.ops.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = self.ops.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            self.ops.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataDirLocked(
                    f"the data directory {self.data_dir} is in use by another forklog process (pid {owner})"
                ) from None
            raise
        except BaseException:
            self.ops.close(fd)
            raise
        self.ops.ftruncate(fd, 0)
        self.ops.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def close(self) -> None:
        self._committer.close()
        if self._lock_fd >= 0:
            self.ops.close(self._lock_fd)
            self._lock_fd = -1

    def path_for(self, session_id: str) -> Path:
        # The id rule admits no separator and no leading dot: a checked id never leaves sessions/.
        return self.sessions_dir / f"{check_id(session_id)}{SUFFIX}"

    # -- create --------------------------------------------------------------------------------------------------

    def create_sync(self, header: SessionHeader, lines: bytes | memoryview) -> None:
        """Write header + lines to a temp file, sync it, link it in place (never overwriting), sync the folder."""
        ops = self.ops
        final = self.path_for(header.id)
        self._committer.forget(final)
        tmp = self.tmp_dir / f"{header.id}.{uuid.uuid4().hex[:12]}.tmp"
        fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                ops.write_all(fd, encode_header(header.record()))
                ops.write_all(fd, lines)
                if self._sync:
                    ops.fsync(fd)
            finally:
                ops.close(fd)
            try:
                ops.link(tmp, final)
            except FileExistsError:
                raise AlreadyOnDisk(str(final)) from None
            if self._sync:
                try:
                    ops.fsync_dir(self.sessions_dir)
                except OSError:
                    # Not acknowledged, so not created: the id must be free on disk as it is in memory.
                    with contextlib.suppress(OSError):
                        ops.unlink(final)
                    raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(tmp)

    async def create(self, header: SessionHeader, lines: bytes | memoryview) -> None:
        try:
            await asyncio.to_thread(self.create_sync, header, lines)
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to create session {header.id!r}: {exc.strerror}") from exc

    # -- append --------------------------------------------------------------------------------------------------

    async def append(self, session_id: str, lines: bytes, *, instance: str) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def done(error: BaseException | None) -> None:
            loop.call_soon_threadsafe(_settle, future, error)

        self._committer.submit(_Append(self.path_for(session_id), instance, lines, done))
        await future

    # -- delete --------------------------------------------------------------------------------------------------

    def delete_sync(self, session_id: str) -> None:
        """Rename the file out of sessions/ (atomic), sync the folder, then unlink it."""
        ops = self.ops
        path = self.path_for(session_id)
        trash = self.tmp_dir / f"{session_id}.{uuid.uuid4().hex[:12]}.deleted"
        ops.rename(path, trash)
        self._committer.forget(path)
        if self._sync:
            try:
                ops.fsync_dir(self.sessions_dir)
            except OSError:
                ops.rename(trash, path)  # not acknowledged: the session keeps its file
                raise
        with contextlib.suppress(OSError):
            ops.unlink(trash)  # the delete is durable already; recover() sweeps a leftover
        with contextlib.suppress(OSError):  # a cut record of another incarnation never applies: instances differ
            self._cuts.clear(path)

    async def delete(self, session_id: str) -> None:
        try:
            await asyncio.to_thread(self.delete_sync, session_id)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to delete session {session_id!r}: {exc.strerror}") from exc

    # -- recovery ------------------------------------------------------------------------------------------------

    def recover(self) -> Recovery:
        """Every session file, rebuilt; a torn tail is truncated away, any other damage is reported and left alone.

        Nothing is followed out of the data directory: an entry of sessions/ that is a symlink (or anything but a
        regular file) is reported, never opened.
        """
        for name, kind in self.ops.scandir(self.tmp_dir):
            # A create or delete that crashed half-way: the file was never linked in, or was already unlinked.
            self._remove_quietly(self.tmp_dir / name, kind)
        recovery = Recovery()
        now = wall_clock_ms()
        indexes: dict[str, Path] = {}
        cuts: set[str] = set()
        for name, kind in self.ops.scandir(self.index_dir):
            path = self.index_dir / name
            if kind == FileKind.REGULAR and name.endswith(INDEX_SUFFIX):
                indexes[name[: -len(INDEX_SUFFIX)]] = path
            elif kind == FileKind.REGULAR and name.endswith(CUT_SUFFIX):
                cuts.add(name[: -len(CUT_SUFFIX)])
            else:  # half-written, or planted: never read
                self._remove_quietly(path, kind)
        for name, kind in self.ops.scandir(self.sessions_dir):
            path = self.sessions_dir / name
            session_id = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
            valid_name = name.endswith(SUFFIX) and ID_PATTERN.fullmatch(session_id) is not None
            if kind != FileKind.REGULAR:
                reason = f"{kind}, never followed or opened" if kind == FileKind.SYMLINK else f"{kind}"
                log.error("%s in sessions/ is %s; it is kept out of service", name, reason)
                recovery.corrupt.append(CorruptFile(session_id, str(path), reason, names_session=valid_name))
                continue
            if not valid_name:
                recovery.corrupt.append(
                    CorruptFile(session_id, str(path), "the file name is not <valid id>.jsonl", names_session=False)
                )
                continue
            index_path = indexes.pop(session_id, None)
            try:
                data = self._read_regular(path)
                data = self._apply_cut(session_id, path, data) if session_id in cuts else data
                index = read_index(index_path, self.ops) if index_path is not None else None
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
                    self._truncate(path, recovered.committed_bytes)
                except OSError as exc:  # appending after the torn bytes would damage the log: keep it out
                    reason = f"a torn last line could not be cut away: {exc.strerror}"
                    log.error("session %s is kept out of service: %s", session_id, reason)
                    created_at = recovered.session.header.created_at
                    recovery.corrupt.append(CorruptFile(session_id, str(path), reason, created_at=created_at))
                    continue
            recovery.sessions.append(recovered)
        for orphan in indexes.values():  # of deleted sessions
            self._remove_quietly(orphan, FileKind.REGULAR)
        return recovery

    def _read_regular(self, path: Path) -> bytes:
        fd = self.ops.open(path, os.O_RDONLY)
        try:
            if self.ops.fstat(fd).st_mode & 0o170000 != 0o100000:  # replaced since it was listed
                raise OSError(errno.EINVAL, "not a regular file")
            return self.ops.read_all(fd)
        finally:
            self.ops.close(fd)

    def _truncate(self, path: Path, size: int) -> None:
        fd = self.ops.open(path, os.O_WRONLY)
        try:
            self.ops.ftruncate(fd, size)
            if self._sync:
                self.ops.fsync(fd)
        finally:
            self.ops.close(fd)

    def _apply_cut(self, session_id: str, path: Path, data: bytes) -> bytes:
        """``data`` without the refused bytes a cut record names (when it is this incarnation's); the file is cut
        too, and the record dropped. CorruptLog when the cut cannot be made: the refused bytes never serve."""
        cut = self._cuts.read(session_id)
        if cut is None:
            return data
        instance = _header_instance(session_id, data)
        if instance == cut.instance and len(data) > cut.size:
            try:
                self._truncate(path, cut.size)
            except OSError as exc:
                raise CorruptLog(
                    f"bytes after byte {cut.size} were refused and could not be cut away: {exc.strerror}"
                ) from None
            log.warning("session %s: cut away %d refused bytes", session_id, len(data) - cut.size)
            data = data[: cut.size]
        try:
            self._cuts.clear(path)
        except OSError as exc:  # the cut is made; the record applies again (harmlessly) at the next start
            log.warning("could not remove the cut record of session %s: %s", session_id, exc.strerror)
        return data

    def _remove_quietly(self, path: Path, kind: str) -> None:
        """Remove a leftover; a folder goes with what it holds, a link goes alone (never followed)."""
        try:
            if kind == FileKind.DIRECTORY:
                self.ops.rmtree(path)
            else:
                self.ops.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("could not remove the leftover %s: %s", path, exc.strerror)

    def save_indexes(self, sessions: Iterable[Session]) -> None:
        """Index every session (at a clean shutdown) so that the next start resumes instead of checking again."""
        for session in sessions:
            try:
                write_index(self.index_dir, session.id, session.log, ops=self.ops, sync=self._sync)
            except OSError as exc:  # an index only makes a start faster: without it the next start checks all
                log.warning("could not write the index of session %s: %s", session.id, exc.strerror)


def _header_instance(session_id: str, data: bytes) -> str | None:
    """The instance a file's header names (or derives), None when the header cannot be read."""
    try:
        return header_from_record(parse_header(data, session_id), session_id).instance
    except CorruptLog:
        return None


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    elif isinstance(error, OSError):
        future.set_exception(StorageUnavailable(f"the disk refused the write: {error.strerror}"))
    else:
        future.set_exception(error)
