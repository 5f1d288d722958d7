"""The persistence layer's errors; foreign ``OSError``s are translated into these once, at the file boundary.

StorageError
├── StorageUnavailable      the disk refused a write; nothing was acknowledged, the file is as it was
├── DataDirLocked           another process owns the data directory
└── UnsafeDataDir           a folder of the data directory is a symlink or not a directory: never followed
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of the persistence layer's errors."""


class StorageUnavailable(StorageError):
    """The disk refused a write (full, read-only, I/O error); the change was rolled back and not acknowledged."""


class DataDirLocked(StorageError):
    """Another live process owns the data directory."""


class UnsafeDataDir(StorageError):
    """A folder (or the lock file) of the data directory is a symlink or the wrong kind: forklog will not start."""
