"""Cut records: durable notes "this session's file must be cut back to N bytes", kept beside its index file.

A failed append whose roll back fails too leaves refused bytes in the file. The note, written and synced at once,
makes every later start cut them away (when the file's header still names the same instance) before it reads the
file, so a restart never resurrects them. It is removed, durably, once the cut is made.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import orjson

from app.backends.files.disk.fileops import FileOps

__all__ = ["CUT_SUFFIX", "Cut", "CutRecords"]

logger = logging.getLogger("forklog.storage")

CUT_SUFFIX = ".cut"


@dataclass(frozen=True, slots=True)
class Cut:
    """The size a file of the incarnation ``instance`` must be cut back to; the note is kept at ``record``."""

    instance: str
    size: int
    record: Path


class CutRecords:
    def __init__(self, ops: FileOps, *, sync: bool) -> None:
        self._ops = ops
        self._sync = sync

    def write(self, cut: Cut) -> None:
        """Write the note atomically (a temp file renamed in place) and durably."""
        note = orjson.dumps({"instance": cut.instance, "size": cut.size})
        self._ops.replace_whole(cut.record, note, sync=self._sync)

    def read(self, record: Path) -> Cut | None:
        """The cut noted at ``record``, or None (none, or unreadable: then there is nothing safe to cut)."""
        try:
            fd = self._ops.open(record, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            note = orjson.loads(self._ops.read_all(fd))
            return Cut(str(note["instance"]), int(note["size"]), record)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.error("the cut record %s cannot be read (%s); it is ignored", record, exc)
            return None
        finally:
            self._ops.close(fd)

    def clear(self, record: Path) -> None:
        """Remove the note durably; OSError if that fails (then it still applies at the next start)."""
        try:
            self._ops.unlink(record)
        except FileNotFoundError:
            return
        if self._sync:
            self._ops.fsync_dir(record.parent)
