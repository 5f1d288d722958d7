"""The checkpoint journal: one append-only file of records for every session of a data directory,
``<data-dir>/index/checkpoints``.

The file starts with a magic line; each record is framed as its length and the CRC-32 of its bytes, then the bytes.
Records are appended (written, then synced) in rounds, and the file is rewritten whole from time to time (a temp
file, synced, renamed over it, the folder synced), keeping one record per live session. Reading stops at the first
record that is not whole or whose CRC differs: after a crash in the middle of an append, that is the torn end; the
records before it stand. A record only ever states facts about bytes that were durable in their session's file
before it was made, so a record that survived without its sync is as true as a synced one.
"""

from __future__ import annotations

import contextlib
import os
import struct
import uuid
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from app.backends.files.disk.fileops import FileOps

__all__ = ["JOURNAL_NAME", "Journal", "Record", "framed"]

JOURNAL_NAME = "checkpoints"
# v2: block digests are BLAKE3 (v1's were SHA-256). A journal of another version is not read: its files are checked
# whole, as if it were missing, and it is rewritten.
MAGIC = b"forklog checkpoints v2\n"
_FRAME = struct.Struct("<II")  # length, CRC-32 of the record


Record = Sequence[bytes | bytearray | memoryview]  # a record's bytes, in pieces


def framed(records: Iterable[Record]) -> list[bytes | bytearray | memoryview]:
    """The pieces of the framed records: each one's length and CRC-32, then its pieces (nothing is copied)."""
    pieces: list[bytes | bytearray | memoryview] = []
    for record in records:
        length, crc = 0, 0
        for piece in record:
            length += len(piece)
            crc = zlib.crc32(piece, crc)
        pieces.append(_FRAME.pack(length, crc))
        pieces.extend(record)
    return pieces


# Small pieces are gathered into writes of about this size (a round of 100k small records is not 1M system calls).
WRITE_BYTES = 1 << 20


def _coalesced(pieces: Iterable[bytes | bytearray | memoryview]) -> Iterator[bytes | bytearray | memoryview]:
    """The same bytes in writes of about WRITE_BYTES: small pieces gathered, large ones passed as they are."""
    gathered = bytearray()
    for piece in pieces:
        if len(piece) >= WRITE_BYTES // 4:
            if gathered:
                yield gathered
                gathered = bytearray()
            yield piece
            continue
        gathered += piece
        if len(gathered) >= WRITE_BYTES:
            yield gathered
            gathered = bytearray()
    if gathered:
        yield gathered


class Journal:
    """The journal at ``path`` (see the module's docstring); appended and rewritten by one thread at a time."""

    def __init__(self, path: Path, ops: FileOps, *, sync: bool) -> None:
        self.path = path
        self._ops = ops
        self._sync = sync
        self._fd = -1
        self.size = 0  # bytes in the file once the last append or rewrite succeeded

    def read(self) -> list[memoryview]:
        """Every whole record, in order, as views of the file's bytes (none if it is missing or not a journal)."""
        ops = self._ops
        try:
            fd = ops.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return []
        try:
            if ops.fstat(fd).st_mode & 0o170000 != 0o100000:
                return []
            data = ops.read_all(fd)
        finally:
            ops.close(fd)
        if not data.startswith(MAGIC):
            return []
        records: list[memoryview] = []
        view = memoryview(data)
        at = len(MAGIC)
        while at + _FRAME.size <= len(data):
            length, crc = _FRAME.unpack_from(data, at)
            start = at + _FRAME.size
            record = view[start : start + length]
            if len(record) != length or zlib.crc32(record) != crc:
                break
            records.append(record)
            at = start + length
        self.size = at
        return records

    def append(self, records: list[Record]) -> None:
        """Append ``records`` durably; OSError if the disk refused (then the file is cut back where it was, or, if
        even that fails, the next call rewrites it)."""
        ops = self._ops
        if self._fd < 0:
            self._open()
        end = self.size
        try:
            for chunk in _coalesced(framed(records)):
                ops.pwrite_all(self._fd, chunk, end)
                end += len(chunk)
            if self._sync:
                ops.fdatasync(self._fd)
        except OSError:
            try:
                ops.ftruncate(self._fd, self.size)
            except OSError:
                self.close()
                self.size = -1  # unknown: only a rewrite makes it whole again
            raise
        self.size = end

    @property
    def broken(self) -> bool:
        """An append failed and could not be cut back: only :meth:`rewrite` makes the file whole again."""
        return self.size < 0

    def rewrite(self, records: list[Record]) -> None:
        """Replace the whole file with ``records``, atomically and durably."""
        ops = self._ops
        folder = self.path.parent
        temporary = folder / f".{JOURNAL_NAME}.{uuid.uuid4().hex[:12]}.tmp"
        size = len(MAGIC)
        fd = ops.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                ops.write_all(fd, MAGIC)
                for chunk in _coalesced(framed(records)):
                    ops.write_all(fd, chunk)
                    size += len(chunk)
                if self._sync:
                    ops.fsync(fd)
            finally:
                ops.close(fd)
            ops.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                ops.unlink(temporary)
            raise
        self.close()
        if self._sync:
            ops.fsync_dir(folder)
        self.size = size

    def _open(self) -> None:
        ops = self._ops
        if self.size <= 0:
            self.rewrite([])  # a journal no start has read (or a broken one) begins anew
        self._fd = ops.open(self.path, os.O_WRONLY)
        try:
            ops.ftruncate(self._fd, self.size)  # whatever lies past the last whole record is a torn append
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                self._ops.close(self._fd)
            self._fd = -1
