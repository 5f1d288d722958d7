"""A data directory opened only to be read (``verify``, ``export``, ``copy``'s source; spec 10), changing nothing.

A :class:`FileReader` reads every session as a start reads it (a torn last line and the bytes a cut record names
are left out, a checkpointed prefix is resumed from the journal), but it takes no lock, makes no folder, cuts no
tail, removes no leftover and writes no checkpoint: the data directory may be read-only, and is left as it was
found, every byte and every directory. A path that is not a data directory holding a forklog store (spec 10: bad
input, never "0 sessions") is refused with :class:`NoStore` before anything else is done.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from app.backends.base import CorruptEntry
from app.backends.catalog import Catalog
from app.backends.catalog_reads import CatalogReads
from app.backends.errors import DataDirLocked, StaleHead, StartRefused
from app.backends.files.appends.cuts import CutRecords
from app.backends.files.archive_journal import ArchiveJournal, apply_archived
from app.backends.files.checkpoints.journal import JOURNAL_NAME, Journal
from app.backends.files.disk.datadir import DataDir
from app.backends.files.disk.encoding import Encoding
from app.backends.files.disk.fileops import FileKind, FileOps
from app.backends.files.frames.file_text import intact_text
from app.backends.files.start.recovery import Recovery, RecoveryReport, salvage_log
from app.domain.log import SessionLog
from app.domain.session import SessionHeader, SessionKey

__all__ = ["STORE_FOLDERS", "FileReader", "NoStore"]

# A directory holds a forklog store when it has at least one of these (a service makes ``sessions/`` at its first
# start, so even a store without any session has it).
STORE_FOLDERS = ("sessions", "tenants")

# A session's lines are handed out this many events at a time.
PIECE_EVENTS = 10_000


class NoStore(StartRefused):
    """The path does not exist, is not a directory, or holds no forklog store."""


class FileReader(CatalogReads):
    """The sessions of the data directory ``data_dir``, read without changing it.

    :meth:`verify` checks every file keeping nothing (it may run beside a service). :meth:`open` loads every
    session into memory, refusing a directory a service owns; then :meth:`find`, :meth:`page`, :meth:`read`,
    :meth:`chunks` and :meth:`tenants` answer as :class:`~app.backends.base.Backend` does. ``checkpoints=False``
    checks every event, ignoring the checkpoint journal.
    """

    name = "files"

    def __init__(
        self, data_dir: Path | str, *, clock: Callable[[], int], checkpoints: bool = True, ops: FileOps | None = None
    ) -> None:
        self.ops = ops if ops is not None else FileOps()
        root = Path(data_dir).absolute()
        _check_store(root, self.ops)
        self.datadir = DataDir(root, self.ops, sync=False, create=False)
        self._clock = clock
        self._checkpoints = checkpoints
        self.catalog = Catalog(clock)
        self._corrupt: list[CorruptEntry] = []

    @property
    def data_dir(self) -> Path:
        return self.datadir.root

    def _recovery(self, *, keep: bool) -> Recovery:
        journal = Journal(self.datadir.root / "index" / JOURNAL_NAME, self.ops, sync=False)
        return Recovery(
            self.datadir,
            self.ops,
            CutRecords(self.ops, sync=False),
            now=self._clock(),
            repair=False,
            sync=False,
            journal=journal if self._checkpoints else None,
            keep=keep,
        )

    # -- verify ----------------------------------------------------------------------------------------------------

    def count_files(self) -> int:
        """How many entries the sessions folders hold (for a progress bar)."""
        return self._recovery(keep=False).count_files()

    def verify(self, progress: Callable[[int], None] | None = None) -> RecoveryReport:
        """Check every session file, keeping none in memory; ``progress(bytes)`` after each file."""
        return self._recovery(keep=False).run(progress)

    # -- a store to read -------------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Load every session; :class:`DataDirLocked` while a service owns the directory (its files may change)."""
        owner = self.datadir.owner()
        if owner is not None:
            raise DataDirLocked(
                f"the data directory {self.datadir.root} is in use by another forklog process (pid {owner})"
            )
        report = await asyncio.to_thread(self._recovery(keep=True).run)
        self.catalog.load(report.sessions)
        archived = ArchiveJournal(self.datadir.root / "index", self.ops, sync=False)
        apply_archived(self.catalog, await asyncio.to_thread(archived.load))  # (read only: never folded here)
        for key, reason, created_at in report.quarantined:
            self.catalog.quarantine(key, reason, created_at=created_at)
        self._corrupt = report.corrupt

    async def close(self) -> None:
        return None  # nothing was taken: no lock, no open file

    @property
    def corrupt(self) -> list[CorruptEntry]:
        """The stored sessions :meth:`open` found damaged (kept out, as a start keeps them out of service)."""
        return list(self._corrupt)

    def chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]:
        """Events ``0 .. stop - 1``, whatever the last of them is (an open turn, a log-only event)."""
        live = self.catalog.get(key)
        if live is None or live.header.instance != instance:
            raise StaleHead(f'session "{key.id}" is not the incarnation {instance!r}')
        return _pieces(live.log, min(stop, len(live.log)))

    def salvage(self, key: SessionKey) -> tuple[SessionHeader, SessionLog, str | None]:
        """What the damaged file of ``key`` holds before its damage (see
        :func:`~app.backends.files.start.recovery.salvage_log`); CorruptLog or OSError (read from :meth:`log_path`)."""
        path = self.log_path(key)
        data = self._read_regular(path)
        if self.datadir.encoding is not Encoding.ZSTD:
            return salvage_log(key.id, data, now=self._clock())
        text, damage = intact_text(data)
        header, log, left_out = salvage_log(key.id, text, now=self._clock())
        return header, log, left_out or damage

    def _read_regular(self, path: Path) -> bytes:
        fd = self.ops.open(path, os.O_RDONLY)  # a symlink is never followed
        try:
            if not stat.S_ISREG(self.ops.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            return self.ops.read_all(fd)
        finally:
            self.ops.close(fd)

    def log_path(self, key: SessionKey) -> Path:
        return self.datadir.log_path(key)


async def _pieces(log: SessionLog, stop: int) -> AsyncIterator[bytes]:
    for start in range(0, stop, PIECE_EVENTS):
        yield log.lines(start, min(stop, start + PIECE_EVENTS))


def _check_store(root: Path, ops: FileOps) -> None:
    kind = ops.kind(root)
    if kind == FileKind.MISSING:
        raise NoStore(f"there is no data directory at {root}")
    if kind != FileKind.DIRECTORY:
        raise NoStore(f"{root} is {kind}, not a data directory")
    if all(ops.kind(root / name) == FileKind.MISSING for name in STORE_FOLDERS):
        raise NoStore(f"{root} holds no forklog store (it has neither a sessions/ nor a tenants/ folder)")
