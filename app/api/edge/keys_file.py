"""The keys file (``FORKLOG_KEYS_FILE``, spec 9): read at start, read again whenever it changes, appended to by
``keys new``.

A change is seen by polling the file's identity (inode, size, modification time) every :data:`POLL_SECONDS`: an
edit in place, a replace by rename and an append all change it, on any file system, with no inotify (which a file
mounted as a Docker secret or on a network share may not deliver). A file that cannot be read or has a bad line on
a reload changes nothing: the keys in force stay, and the error is logged with the line.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from app.domain.access import ApiKey, BadKeyLine, KeyRing, KeysFileContent, case_clash, key_line, parse_keys_file
from app.domain.errors import ConfigurationError
from app.domain.limits import TenantLimits

__all__ = ["POLL_SECONDS", "KeysFile", "KeysFileError", "append_key"]

logger = logging.getLogger("forklog.keys")

POLL_SECONDS = 1.0  # the spec allows 5 s from a change to its effect

Identity = tuple[int, int, int, int]


class KeysFileError(ConfigurationError):
    """The keys file cannot be used; the message names the file and, for a bad line, the line."""


def _identity(path: Path) -> Identity:
    status = os.stat(path)
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def read_keys_file(path: Path) -> KeysFileContent:
    """The keys and the tenant lines of the file (spec 14's limits ride in it too)."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        raise KeysFileError(
            f"keys file {path}: no such file; make one with: python -m app keys new --tenant default --scope read "
            f"--scope write --keys-file {path}"
        ) from None
    except OSError as exc:
        raise KeysFileError(f"keys file {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return parse_keys_file(text)
    except BadKeyLine as exc:
        raise KeysFileError(f"keys file {path}: {exc}") from None


class KeysFile:
    """The keys of one file, kept current by :meth:`reload_if_changed` (see :mod:`app.api.edge.keys_in_force`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._identity = _identity_or_none(path)
        content = read_keys_file(path)
        self.keys = KeyRing(content.keys)
        self.tenant_limits: dict[str, TenantLimits] = content.tenant_limits
        if not len(self.keys):
            logger.warning("keys file %s holds no key: every request that needs one will be refused", path)

    def reload_if_changed(self) -> bool:
        """Read the file again if it changed since the last look; True when new keys are in force."""
        identity = _identity_or_none(self.path)
        if identity == self._identity:
            return False
        self._identity = identity
        try:
            content = read_keys_file(self.path)
        except KeysFileError as exc:
            logger.error("%s; the keys read before stay in force", exc)
            return False
        self.keys = KeyRing(content.keys)
        self.tenant_limits = content.tenant_limits
        logger.info("keys file %s read again: %d keys", self.path, len(content.keys))
        return True


def _identity_or_none(path: Path) -> Identity | None:
    try:
        return _identity(path)
    except OSError:
        return None


def append_key(path: Path, key: ApiKey) -> None:
    """Add ``key``'s line to the file (made with mode 0600 if absent), synced; refused if the file has a bad line,
    the key's id is taken, or its tenant differs from another key's only in letter case.

    The check and the append hold an exclusive ``flock`` on the file itself: two ``keys new`` at once with one id
    write it once (the second finds it), where an unlocked check-then-append let both write it and made every later
    read of the file fail. A file replaced (renamed over) while waiting for the lock is opened again.
    """
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            if _is_still(path, descriptor):
                _append_locked(path, descriptor, key)
                return
        finally:
            os.close(descriptor)  # releases the lock, after the line is synced


def _is_still(path: Path, descriptor: int) -> bool:
    """Whether ``path`` still names the file open as ``descriptor``."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(descriptor)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def _append_locked(path: Path, descriptor: int, key: ApiKey) -> None:
    text = _read_all(descriptor)
    try:
        existing = parse_keys_file(text).keys
    except BadKeyLine as exc:
        raise KeysFileError(f"keys file {path}: {exc}") from None
    if any(other.id == key.id for other in existing):
        raise KeysFileError(f"keys file {path}: a key with id {key.id!r} exists; pick another --id")
    clash = case_clash(key.tenant, {other.tenant.casefold(): other.tenant for other in existing})
    if clash is not None:
        raise KeysFileError(f"keys file {path}: {clash}")
    line = key_line(key)
    if text and not text.endswith(b"\n"):
        line = b"\n" + line
    while line:
        line = line[os.write(descriptor, line) :]
    os.fsync(descriptor)


def _read_all(descriptor: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while chunk := os.pread(descriptor, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
