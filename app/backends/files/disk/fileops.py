"""The file backend's one door to the operating system: every call that touches the data directory goes through
:class:`FileOps`, so a test injects a fault (ENOSPC, EIO on sync, EIO on truncate) by overriding one method of a
subclass instead of patching a module.

Paths are opened with ``O_NOFOLLOW``: a symbolic link planted in the data directory is never followed, so nothing
outside it is read or written through one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import platform
import re
import shutil
import stat
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

__all__ = ["FileKind", "FileOps", "kind_of", "release_free_memory"]

StrPath = str | Path

# Flags every open of a path in the data directory carries: no symlink is followed, no FIFO blocks the caller.
SAFE_OPEN = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class FileKind:
    """What an entry of a folder is, as ``lstat`` sees it (a link is never resolved)."""

    REGULAR = "a regular file"
    DIRECTORY = "a directory"
    SYMLINK = "a symbolic link"
    MISSING = "missing"
    OTHER = "not a regular file"


def kind_of(mode: int) -> str:
    if stat.S_ISREG(mode):
        return FileKind.REGULAR
    if stat.S_ISDIR(mode):
        return FileKind.DIRECTORY
    if stat.S_ISLNK(mode):
        return FileKind.SYMLINK
    return FileKind.OTHER


def _entry_kind(entry: os.DirEntry[str]) -> str:
    """What a folder entry is, from the folder listing itself where the file system says (no stat per entry)."""
    if entry.is_symlink():
        return FileKind.SYMLINK
    if entry.is_file(follow_symlinks=False):
        return FileKind.REGULAR
    if entry.is_dir(follow_symlinks=False):
        return FileKind.DIRECTORY
    return FileKind.OTHER


def _load_syncfs() -> Callable[[int], int] | None:
    """syncfs(2), where it reports write errors (Linux 5.8 and later); None elsewhere."""
    release = re.match(r"(\d+)\.(\d+)", platform.release())
    if not sys.platform.startswith("linux") or release is None or (int(release[1]), int(release[2])) < (5, 8):
        return None
    function: Callable[[int], int] | None = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
    return function


_SYNCFS = _load_syncfs()


def release_free_memory() -> None:
    """Give the memory a start used only while it ran (the journal, each file's parse) back to the system: glibc's
    malloc keeps freed memory for reuse otherwise (malloc_trim; nothing elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return
    trim(0)


class FileOps:
    """The system calls of the file backend. Subclass and override a method to make the disk misbehave."""

    # -- descriptors -----------------------------------------------------------------------------------------------

    def open(self, path: StrPath, flags: int, mode: int = 0o600) -> int:
        """Open ``path`` without following a symlink; a FIFO or device never blocks (callers check the kind)."""
        return os.open(path, flags | SAFE_OPEN, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def write_all(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = self.write(fd, view)
            view = view[written:]

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        return os.pwrite(fd, data, offset)

    def pwrite_all(self, fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = self.pwrite(fd, view, offset)
            view = view[written:]
            offset += written

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def read_all(self, fd: int) -> bytes:
        """The whole content of the regular file open at ``fd``."""
        size = self.fstat(fd).st_size
        chunks: list[bytes] = []
        offset = 0
        while True:
            chunk = self.pread(fd, max(size - offset, 1 << 16), offset)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            offset += len(chunk)

    def copy_file_range(self, source: int, target: int, count: int, offset: int) -> int:
        """Copy up to ``count`` bytes of ``source`` from ``offset`` to ``target``'s position, in the kernel (a
        reflink where the file system has one); how many were copied. OSError where the system cannot."""
        copy = getattr(os, "copy_file_range", None)
        if copy is None:
            raise OSError(errno.ENOSYS, "copy_file_range is not available")
        copied: int = copy(source, target, count, offset)
        return copied

    def fstat(self, fd: int) -> os.stat_result:
        return os.fstat(fd)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def set_mtime(self, fd: int, mtime_ns: int) -> None:
        """Set the file's modification time (its access time kept)."""
        os.utime(fd, ns=(os.fstat(fd).st_atime_ns, mtime_ns))

    def flock(self, fd: int, operation: int) -> None:
        fcntl.flock(fd, operation)

    def syncfs(self, fd: int) -> None:
        """Commit every file of ``fd``'s file system at once; only where :attr:`has_syncfs`."""
        if _SYNCFS is None:
            raise OSError(38, "syncfs is not available")
        if _SYNCFS(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))

    @property
    def has_syncfs(self) -> bool:
        return _SYNCFS is not None

    @property
    def syncs_natively(self) -> bool:
        """Whether :meth:`syncfs` and :meth:`fdatasync` are the system's own calls, so that another process may
        make them in their stead (app.backends.files.appends.sync_process); a subclass that overrides one is called."""
        cls = type(self)
        return self.has_syncfs and cls.syncfs is FileOps.syncfs and cls.fdatasync is FileOps.fdatasync

    # -- names -----------------------------------------------------------------------------------------------------

    def lstat(self, path: StrPath) -> os.stat_result:
        return os.lstat(path)

    def kind(self, path: StrPath) -> str:
        """What ``path`` is, without following a symlink."""
        try:
            return kind_of(self.lstat(path).st_mode)
        except FileNotFoundError:
            return FileKind.MISSING

    def mkdir(self, path: StrPath, mode: int = 0o700) -> None:
        os.mkdir(path, mode)

    def scandir(self, path: StrPath) -> list[tuple[str, str]]:
        """The entries of a folder as (name, kind), sorted by name; links are reported, not followed."""
        with os.scandir(path) as entries:
            found = [(entry.name, _entry_kind(entry)) for entry in entries]
        return sorted(found)

    def link(self, source: StrPath, target: StrPath) -> None:
        """A new name for ``source``; an existing ``target`` (a symlink included) raises FileExistsError."""
        os.link(source, target, follow_symlinks=False)

    def unlink(self, path: StrPath) -> None:
        os.unlink(path)

    def rename(self, source: StrPath, target: StrPath) -> None:
        os.rename(source, target)

    def replace(self, source: StrPath, target: StrPath) -> None:
        os.replace(source, target)

    def rmtree(self, path: StrPath) -> None:
        """Remove a real folder and what it holds; links inside it are removed, never followed."""
        shutil.rmtree(path)

    def replace_whole(self, path: Path, data: bytes, *, sync: bool) -> None:
        """Make ``path`` hold ``data`` at once or not at all: a temp file beside it, synced, renamed over it, and the
        folder synced (``sync`` off skips both syncs). A failure leaves ``path`` as it was and no temp file."""
        temporary = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
        fd = self.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                self.write_all(fd, data)
                if sync:
                    self.fsync(fd)
            finally:
                self.close(fd)
            self.replace(temporary, path)
            if sync:
                self.fsync_dir(path.parent)
        except BaseException:
            with contextlib.suppress(OSError):
                self.unlink(temporary)
            raise

    def fsync_dir(self, path: StrPath) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            self.fsync(fd)
        finally:
            os.close(fd)
