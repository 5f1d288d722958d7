"""The storage layer's errors. Each backend translates its foreign errors (``OSError``, the database driver's) into
these once, at its boundary.

    StorageError                 (a ForklogError) the storage could not do what was asked
    ├── StorageUnavailable       the disk or database refused or is unreachable; nothing was acknowledged
    ├── SessionCorrupt           the session's stored log is damaged and kept out of service
    ├── AlreadyExists            a create found its id taken (by another process, on a shared store)
    ├── StaleHead                an append was staged on a head another process has moved since
    ├── AlreadyRemembered        an idempotent change's key was kept already (by another process, on a shared store)
    └── StartRefused             the store will not open: the data directory is locked, unsafe, or too new
        ├── DataDirLocked        another process owns the data directory
        └── UnsafeDataDir        a folder of the data directory is a symlink or not a directory
"""

from __future__ import annotations

from app.domain.errors import ErrorCode, ForklogError

__all__ = [
    "AlreadyExists",
    "AlreadyRemembered",
    "DataDirLocked",
    "SessionCorrupt",
    "StaleHead",
    "StartRefused",
    "StorageError",
    "StorageUnavailable",
    "UnsafeDataDir",
]


class StorageError(ForklogError):
    """Base of the storage layer's errors."""

    code = ErrorCode.STORAGE_UNAVAILABLE


class StorageUnavailable(StorageError):
    """The disk or database refused a change or a read (full, read-only, I/O error, unreachable); the change was
    rolled back and not acknowledged."""


class SessionCorrupt(StorageError):
    """The session's stored log is damaged; every request naming its id answers SESSION_CORRUPT until repaired."""

    code = ErrorCode.SESSION_CORRUPT

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(
            f'session "{session_id}" has a damaged log and is kept out of service until an operator repairs it',
            reason=reason,
        )


class AlreadyExists(StorageError):
    """A create (or fork) found its id already live."""

    code = ErrorCode.SESSION_ALREADY_EXISTS

    def __init__(self, session_id: str) -> None:
        super().__init__(f'session "{session_id}" already exists; pick another id or omit it')


class StaleHead(StorageError):
    """The session's head moved (another process appended) since the batch was staged: stage it again."""


class AlreadyRemembered(StorageError):
    """An idempotent change found its key kept already: nothing was done; recall the record and answer with it."""

    code = ErrorCode.IDEMPOTENCY_KEY_IN_PROGRESS


class StartRefused(StorageError):
    """The store cannot open; the message says why and what to do."""


class DataDirLocked(StartRefused):
    """Another live process owns the data directory."""


class UnsafeDataDir(StartRefused):
    """A folder (or the lock file) of the data directory is a symlink or the wrong kind: forklog will not start."""
