"""The keys file (``FORKLOG_KEYS_FILE``, spec 9): read at start, read again whenever it changes, appended to by
``keys new``.

A change is seen by polling the file's identity (inode, size, modification time) every :data:`POLL_SECONDS`: an
edit in place, a replace by rename and an append all change it, on any file system, with no inotify (which a file
mounted as a Docker secret or on a network share may not deliver). A file that cannot be read or has a bad line on
a reload changes nothing: the keys in force stay, and the error is logged with the line.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from app.domain.access import ApiKey, BadKeyLine, KeyRing, KeysFileContent, key_line, parse_keys_file
from app.domain.limits import TenantLimits

__all__ = ["POLL_SECONDS", "KeysFile", "KeysFileError", "append_key"]

logger = logging.getLogger("forklog.keys")

POLL_SECONDS = 1.0  # the spec allows 5 s from a change to its effect

Identity = tuple[int, int, int, int]


class KeysFileError(Exception):
    """The keys file cannot be used; the message names the file and, for a bad line, the line."""


def _identity(path: Path) -> Identity:
    status = os.stat(path)
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)


def read_keys(path: Path) -> list[ApiKey]:
    return read_keys_file(path).keys


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
    """The keys of one file, kept current by :meth:`watch`."""

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

    async def watch(self) -> None:
        """Look for changes until cancelled."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            await asyncio.to_thread(self.reload_if_changed)


def _identity_or_none(path: Path) -> Identity | None:
    try:
        return _identity(path)
    except OSError:
        return None


def append_key(path: Path, key: ApiKey) -> None:
    """Add ``key``'s line to the file (made with mode 0600 if absent), synced; refused if the file has a bad line or
    the key's id is taken."""
    existing = read_keys(path) if path.exists() else []
    if any(other.id == key.id for other in existing):
        raise KeysFileError(f"keys file {path}: a key with id {key.id!r} exists; pick another --id")
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        line = key_line(key)
        if os.fstat(descriptor).st_size and not path.read_bytes().endswith(b"\n"):
            line = b"\n" + line
        os.write(descriptor, line)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
