"""The data directory's layout, its lock, and the rule that nothing is followed out of it.

Layout::

    <data-dir>/forklog.lock                  held (flock) by the one process that owns the directory
    <data-dir>/format.json                   the directory's encoding (spec 16: disk/encoding.py)
    <data-dir>/sessions/<id>.jsonl.zstd      the sessions of the tenant "default" (<id>.jsonl in a ``none`` one)
    <data-dir>/index/                        their index files and cut records; the journals of every tenant's
                                             checkpoints, idempotency records and archived sessions
    <data-dir>/tenants/<tenant>/sessions/    the sessions of any other tenant (spec 9)
    <data-dir>/tenants/<tenant>/index/
    <data-dir>/tmp/                          files being created or deleted; emptied at start

Every folder is made if missing and refused if it is a symbolic link or not a directory.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from app.backends.errors import DataDirLocked, StorageUnavailable, UnsafeDataDir
from app.backends.files.disk.encoding import Encoding, settle_encoding
from app.backends.files.disk.fileops import FileKind, FileOps
from app.domain.ids import ID_PATTERN, check_id
from app.domain.session import DEFAULT_TENANT, SessionKey

__all__ = ["LOG_SUFFIX", "DataDir", "Space"]

logger = logging.getLogger("forklog.storage")

LOG_SUFFIX = ".jsonl"
LOCK_NAME = "forklog.lock"


@dataclass(frozen=True, slots=True)
class Space:
    """One tenant's folders."""

    tenant: str
    sessions: Path
    index: Path
    suffix: str = LOG_SUFFIX  # of a session's file: the data directory's encoding's

    def log_path(self, session_id: str) -> Path:
        # The id rule admits no separator and no leading dot: a checked id never leaves sessions/.
        return self.sessions / f"{check_id(session_id)}{self.suffix}"


class DataDir:
    """The folders of one data directory; :meth:`lock` takes it for this process.

    With ``create=False`` (a tool that only reads, as ``verify``) nothing is made: a missing folder is only missing.
    ``compression`` is the encoding asked for (None: the directory's own, zstd for a new one); the one it holds is
    :attr:`encoding`.
    """

    def __init__(
        self,
        root: Path | str,
        ops: FileOps,
        *,
        sync: bool,
        create: bool = True,
        compression: Encoding | str | None = None,
    ) -> None:
        self.root = Path(root).absolute()
        self.tmp = self.root / "tmp"
        self.tenants = self.root / "tenants"
        self._ops = ops
        self._sync = sync
        self._create = create
        self._spaces: dict[str, Space] = {}
        self._lock_fd = -1
        wanted = Encoding(compression) if compression is not None else None
        if not create:
            self.encoding = settle_encoding(self.root, ops, wanted, sync=False, create=False)
            for folder in (self.root, self.root / "sessions", self.tmp, self.root / "index", self.tenants):
                if ops.kind(folder) != FileKind.MISSING:
                    self._ensure_folder(folder)
            return
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageUnavailable(f"cannot create the data directory {self.root}: {exc.strerror}") from exc
        self.encoding = settle_encoding(self.root, ops, wanted, sync=sync, create=True)
        for folder in (self.root / "sessions", self.tmp, self.root / "index"):
            self._ensure_folder(folder)
        if self._ops.kind(self.tenants) != FileKind.MISSING:
            self._ensure_folder(self.tenants)
        if sync:
            # New folders are durable only once their parents' entries are: sync them before any session is made.
            for folder in (self.root.parent, self.root):
                with contextlib.suppress(OSError):  # a parent we may not open: then nothing more can be done
                    ops.fsync_dir(folder)

    def _ensure_folder(self, folder: Path) -> None:
        """Make ``folder`` if it is missing; refuse one that is a symlink or not a directory."""
        kind = self._ops.kind(folder)
        if kind == FileKind.MISSING:
            try:
                self._ops.mkdir(folder)
            except FileExistsError:
                kind = self._ops.kind(folder)
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

    # -- spaces ----------------------------------------------------------------------------------------------------

    def space(self, tenant: str) -> Space:
        """The folders of ``tenant``, made on first use (a tenant's name follows the id rule).

        A tenant's first create makes its folders while answering a request, and a problem detail names no server
        path (spec 9): a folder that cannot be used is named in the server log, and refused without its path.
        """
        space = self._spaces.get(tenant)
        if space is not None:
            return space
        try:
            return self._make_space(tenant)
        except (UnsafeDataDir, StorageUnavailable) as exc:
            logger.error("the folders of tenant %r cannot be used: %s", tenant, exc.detail)
            refusal = UnsafeDataDir if isinstance(exc, UnsafeDataDir) else StorageUnavailable
            raise refusal(
                f"the data directory cannot hold the sessions of tenant {tenant!r}: one of its folders is not a "
                "directory or cannot be made (the server log names it)"
            ) from None

    def _make_space(self, tenant: str) -> Space:
        """The folders of ``tenant``, made now; errors name the folder (a start shows them to the operator)."""
        if tenant == DEFAULT_TENANT:
            space = Space(tenant, self.root / "sessions", self.root / "index", self.encoding.suffix)
        else:
            base = self.tenants / check_id(tenant, "tenant")
            space = Space(tenant, base / "sessions", base / "index", self.encoding.suffix)
            for folder in (self.tenants, base, space.sessions, space.index):
                if self._create or self._ops.kind(folder) != FileKind.MISSING:
                    self._ensure_folder(folder)
            if self._sync and self._create:
                for folder in (self.root, self.tenants, base):
                    self._ops.fsync_dir(folder)
        self._spaces[tenant] = space
        return space

    def log_path(self, key: SessionKey) -> Path:
        return self.space(key.tenant).log_path(key.id)

    def spaces(self) -> list[Space]:
        """Every tenant's folders found on disk, the default tenant first."""
        found = [self._spaces.get(DEFAULT_TENANT) or self._make_space(DEFAULT_TENANT)]
        if self._ops.kind(self.tenants) == FileKind.DIRECTORY:
            for name, kind in self._ops.scandir(self.tenants):
                if kind == FileKind.DIRECTORY and ID_PATTERN.fullmatch(name) is not None and name != DEFAULT_TENANT:
                    found.append(self._spaces.get(name) or self._make_space(name))
                elif kind == FileKind.SYMLINK:
                    raise UnsafeDataDir(
                        f"{self.tenants / name} is a symbolic link; forklog never follows one out of its data "
                        "directory: replace it with a real directory"
                    )
        return found

    # -- the lock --------------------------------------------------------------------------------------------------

    def lock(self) -> None:
        """Take the directory for this process (held until :meth:`unlock`); write our pid into the lock file."""
        path = self.root / LOCK_NAME
        ops = self._ops
        try:
            fd = ops.open(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeDataDir(
                    f"{path} is a symbolic link; forklog never follows one: remove it and start again"
                ) from None
            raise StorageUnavailable(f"cannot open {path}: {exc.strerror}") from exc
        try:
            if ops.kind(path) != FileKind.REGULAR:
                raise UnsafeDataDir(f"{path} is not a regular file: remove it and start again")
            ops.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            owner = ops.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            ops.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DataDirLocked(
                    f"the data directory {self.root} is in use by another forklog process (pid {owner})"
                ) from None
            raise StorageUnavailable(f"cannot lock {path}: {exc.strerror}") from exc
        except BaseException:
            ops.close(fd)
            raise
        ops.ftruncate(fd, 0)
        ops.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd >= 0:
            self._ops.close(self._lock_fd)
            self._lock_fd = -1

    def owner(self) -> str | None:
        """The pid of the process holding the lock, or None if the directory is free (for tools run beside it)."""
        path = self.root / LOCK_NAME
        try:
            fd = self._ops.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            try:
                self._ops.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return self._ops.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            self._ops.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            self._ops.close(fd)
