"""A data directory's encoding (spec 16): ``zstd`` (DSH's ``.jsonl.zstd``) or ``none`` (raw ``.jsonl``).

The encoding is fixed when forklog first makes the directory and recorded in it, in ``<data-dir>/format.json``
(``{"compression": "zstd"}``), written (and synced) before the first folder, so that a directory holding sessions
always holds its record too. A directory with sessions but no record was written by a forklog from before the
setting: it is ``none``. A start that asks for the other encoding is refused: one directory holds one encoding,
as a DSH root does, and ``forklog copy`` converts.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from enum import StrEnum
from pathlib import Path

import orjson

from app.backends.errors import StartRefused, StorageUnavailable
from app.backends.files.disk.fileops import FileKind, FileOps

__all__ = ["FORMAT_NAME", "Encoding", "EncodingMismatch", "recorded_encoding", "settle_encoding"]

FORMAT_NAME = "format.json"
# The folders whose presence says a directory was made by a forklog already (with or without a record).
_MADE_BY_FORKLOG = ("sessions", "tenants")


class Encoding(StrEnum):
    ZSTD = "zstd"
    NONE = "none"

    @property
    def suffix(self) -> str:
        """The suffix of a session's file in a directory of this encoding."""
        return ".jsonl.zstd" if self is Encoding.ZSTD else ".jsonl"

    @property
    def other(self) -> Encoding:
        return Encoding.NONE if self is Encoding.ZSTD else Encoding.ZSTD


DEFAULT_ENCODING = Encoding.ZSTD


class EncodingMismatch(StartRefused):
    """A start asks for the encoding the data directory does not hold."""


def recorded_encoding(root: Path, ops: FileOps) -> Encoding | None:
    """The encoding ``root`` records; ``none`` for a directory forklog made before the record existed; None for a
    directory forklog has not made yet (nothing of it there)."""
    path = root / FORMAT_NAME
    try:
        fd = ops.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if any(ops.kind(root / name) != FileKind.MISSING for name in _MADE_BY_FORKLOG):
            return Encoding.NONE
        return None
    except OSError as exc:
        raise StorageUnavailable(f"cannot read {path}: {exc.strerror}") from exc
    try:
        try:
            record = orjson.loads(ops.read_all(fd))
            return Encoding(record["compression"])
        except (ValueError, KeyError, TypeError):
            raise StartRefused(
                f"{path} does not say the data directory's encoding "
                '(it should hold {"compression": "zstd"} or {"compression": "none"}): restore it'
            ) from None
    finally:
        ops.close(fd)


def settle_encoding(root: Path, ops: FileOps, wanted: Encoding | None, *, sync: bool, create: bool) -> Encoding:
    """The encoding of the data directory at ``root``: the one it records, or for a directory not made yet
    ``wanted`` (default zstd), then recorded when ``create``. :class:`EncodingMismatch` when ``wanted`` is the other
    encoding of a directory made already."""
    recorded = recorded_encoding(root, ops)
    if recorded is None:
        chosen = wanted or DEFAULT_ENCODING
        if create:
            _record(root, ops, chosen, sync=sync)
        return chosen
    if wanted is not None and wanted is not recorded:
        raise EncodingMismatch(
            f"the data directory {root} holds its sessions in the {recorded.value!r} encoding "
            f"({recorded.suffix} files), but compression {wanted.value!r} was asked for (FORKLOG_COMPRESSION, "
            f"--compression): one data directory holds one encoding. Start without the setting (or with "
            f"{recorded.value!r}), or convert it with forklog copy (`python -m app copy --from {root} --to NEW_DIR`) "
            f"into a new data directory of the {wanted.value!r} encoding"
        )
    return recorded


def _record(root: Path, ops: FileOps, encoding: Encoding, *, sync: bool) -> None:
    """Write the record atomically (a temp file renamed in place), durably, before any folder exists."""
    path = root / FORMAT_NAME
    temporary = root / f".{FORMAT_NAME}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        fd = ops.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            ops.write_all(fd, orjson.dumps({"compression": encoding.value}) + b"\n")
            if sync:
                ops.fsync(fd)
        finally:
            ops.close(fd)
        ops.replace(temporary, path)
        if sync:
            ops.fsync_dir(root)
    except OSError as exc:
        with contextlib.suppress(OSError):
            ops.unlink(temporary)
        raise StorageUnavailable(f"cannot write {path}: {exc.strerror}") from exc
