"""The one place where the operating system's errors become the file backend's storage errors.

Every read or change of a request that touches the disk runs inside :func:`disk_errors`: an ``OSError`` there (a
full disk, a read-only file system, an I/O error, a folder that went away) is logged with its path and answered as
:class:`~app.backends.errors.ReadFailed` or :class:`~app.backends.errors.ChangeRefused` -- never with the path, which
names the server's layout to a client. A change is written and synced before it is made visible, and undone on
disk when it fails, so a refused change stored nothing.
"""

from __future__ import annotations

import errno
import logging
from contextlib import AbstractContextManager
from types import TracebackType

from app.backends.errors import Access

__all__ = ["disk_errors", "disk_reason"]

logger = logging.getLogger("forklog.storage")


def disk_reason(exc: OSError) -> str:
    """What a client is told of ``exc``: the system's words for it, without any path."""
    if exc.strerror:
        return exc.strerror.lower()
    if exc.errno is not None:
        return errno.errorcode.get(exc.errno, f"error {exc.errno}")
    return type(exc).__name__


def disk_errors(access: Access, what: str) -> AbstractContextManager[None]:
    """Run a ``what`` (e.g. "create session 'a'"); an ``OSError`` becomes the storage error of ``access``."""
    return _DiskErrors(access, what)


class _DiskErrors:
    # A class rather than a generator-based context manager: it wraps every append and read, and costs a third.
    __slots__ = ("_access", "_what")

    def __init__(self, access: Access, what: str) -> None:
        self._access = access
        self._what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if isinstance(exc, OSError):
            logger.error("the disk refused to %s: %s", self._what, exc)
            raise self._access.refused(f"the disk refused to {self._what}: {disk_reason(exc)}") from exc
