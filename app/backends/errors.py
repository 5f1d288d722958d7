"""The storage layer's errors. Each backend translates its foreign errors (``OSError``, the database driver's) into
these in one place: :mod:`app.backends.files.disk.errors` and :mod:`app.backends.postgres.errors`.

    StorageError                 (a ForklogError) the store could not do what was asked
    ├── StorageUnavailable       STORAGE_UNAVAILABLE: the disk or database refused, or could not be reached
    │   ├── ReadFailed           a read failed; nothing was changed
    │   ├── ChangeRefused        a change was refused and rolled back; nothing was stored
    │   └── OutcomeUnknown       the database was lost while a change committed: it may or may not be stored
    ├── SessionCorrupt           SESSION_CORRUPT: the session's stored log is damaged and kept out of service
    ├── NothingToSalvage         a damaged session file cannot be read, or even its header is damaged (``export``)
    └── StartRefused             the store will not open (a message for the operator, at a start)
        ├── DataDirLocked        another process owns the data directory
        └── UnsafeDataDir        a folder of the data directory is a symlink or not a directory

    StorageConflict              (not a ForklogError: never an answer) a change lost a race on a shared store
    ├── StaleHead                an append was staged on a head another process has moved since: stage it again
    └── IdempotencyKeyTaken      another change kept its record under the Idempotency-Key first: answer from it

A create or fork that finds its id taken raises the domain's
:class:`~app.domain.errors.SessionAlreadyExists`, the one class of SESSION_ALREADY_EXISTS, wherever it is found.
The service turns every :class:`StorageConflict` into an answer (a retry, SEQ_CONFLICT, the kept answer, or
IDEMPOTENCY_KEY_IN_PROGRESS); one that escaped would be a bug.
"""

from __future__ import annotations

from enum import Enum

from app.domain.errors import ErrorCode, ForklogError

__all__ = [
    "Access",
    "ChangeRefused",
    "DataDirLocked",
    "IdempotencyKeyTaken",
    "NothingToSalvage",
    "OutcomeUnknown",
    "ReadFailed",
    "SessionCorrupt",
    "StaleHead",
    "StartRefused",
    "StorageConflict",
    "StorageError",
    "StorageUnavailable",
    "UnsafeDataDir",
]


class StorageError(ForklogError):
    """Base of the storage layer's errors."""

    code = ErrorCode.STORAGE_UNAVAILABLE


class StorageUnavailable(StorageError):
    """The disk or database refused or could not be reached; the subclasses say whether anything may have changed."""


class ReadFailed(StorageUnavailable):
    """A read failed (the disk, or the database, refused or is unreachable); nothing was changed."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the store could not be read ({reason}); nothing was changed, retry later")


class ChangeRefused(StorageUnavailable):
    """A change was refused (full, read-only, I/O error, unreachable, a conflict) and rolled back: nothing was
    stored, so a retry cannot make it twice."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the store refused the change ({reason}); nothing was stored, retry later")


class OutcomeUnknown(StorageUnavailable):
    """The database was lost while the change was sent or committed: it may have been stored. A retry with the same
    Idempotency-Key takes effect exactly once (spec 6, Failover)."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the database was lost before the change was known to be stored ({reason}); retry it with the same "
            "Idempotency-Key (without one, read the session first: the change may have been stored)"
        )


class Access(Enum):
    """What a request asked of the store: what a failure answers depends on it."""

    READ = "read"
    CHANGE = "change"

    def refused(self, reason: str) -> StorageUnavailable:
        """The error of this access refused with nothing done: a read that failed, or a change not stored."""
        return ReadFailed(reason) if self is Access.READ else ChangeRefused(reason)


class SessionCorrupt(StorageError):
    """The session's stored log is damaged; every request naming its id answers SESSION_CORRUPT until repaired."""

    code = ErrorCode.SESSION_CORRUPT

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(
            f'session "{session_id}" has a damaged log and is kept out of service until an operator repairs it',
            reason=reason,
        )


class NothingToSalvage(StorageError):
    """``export --salvage`` finds nothing to write: the damaged session's file cannot be read, or even its header
    is damaged; the message names the file and why."""


class StartRefused(StorageError):
    """The store cannot open; the message says why and what to do."""


class DataDirLocked(StartRefused):
    """Another live process owns the data directory."""


class UnsafeDataDir(StartRefused):
    """A folder (or the lock file) of the data directory is a symlink or the wrong kind: forklog will not start."""


class StorageConflict(Exception):
    """A change lost a race with another process on a shared store; nothing was done. The service decides what the
    request answers: this is never an answer of its own."""


class StaleHead(StorageConflict):
    """The session's head moved (another process appended) since the batch was staged: stage it again."""


class IdempotencyKeyTaken(StorageConflict):
    """Another change (of another process, or of the same batch's earlier round) kept its record under this
    tenant's Idempotency-Key first: nothing was done; recall the record and answer with it, or, while it is not
    there yet, IDEMPOTENCY_KEY_IN_PROGRESS (:class:`~app.service.errors.IdempotencyKeyInProgress`)."""
