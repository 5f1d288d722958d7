"""Index files: what a restart needs to resume a session without checking its stored events again.

``<index>/<id>.idx`` is written at a clean shutdown: one JSON line (the byte length and a BLAKE2b digest of the
events' bytes, and the log's state), then the line offsets as raw bytes. At the next start, when the session file
still begins with exactly those bytes, the log is resumed from the index and only the lines after them are checked.
Any doubt (no index, a digest that differs, a file shorter than the prefix, an index that does not parse) means the
whole file is checked as if there were no index: the index can make a start faster, never different.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.backends.files.fileops import FileOps
from app.domain.events import LogState
from app.domain.log import Checkpoint, LogParts, SessionLog

__all__ = ["INDEX_SUFFIX", "Index", "digest", "read_index", "write_index"]

INDEX_VERSION = 1
INDEX_SUFFIX = ".idx"


@dataclass(frozen=True, slots=True)
class Index:
    body_bytes: int
    digest: str
    description: dict[str, Any]
    ends: bytes

    def resume(self, events: bytes | memoryview) -> SessionLog | None:
        """The log, when ``events`` (the file's bytes after its header) begin with the indexed bytes; else None."""
        if len(events) < self.body_bytes:
            return None
        prefix = events[: self.body_bytes]
        if digest(prefix) != self.digest:
            return None
        try:
            return SessionLog.from_parts(bytearray(prefix), _parts(self.description, self.ends))
        except (ValueError, KeyError, TypeError, OverflowError):
            return None


def digest(data: bytes | bytearray | memoryview) -> str:
    return hashlib.blake2b(data, digest_size=32).hexdigest()


def _describe(parts: LogParts, body_bytes: int) -> dict[str, Any]:
    state = parts.state
    return {
        "count": state.count,
        "lastTime": state.last_time,
        "lastType": state.last_type,
        "lastTurnEndSeq": state.last_turn_end_seq,
        "openTurn": state.open_turn,
        "openStep": state.open_step,
        "nextTurn": state.next_turn,
        "nextStep": state.next_step,
        "pending": sorted(state.pending),
        "nodes": state.nodes,
        "surfaceOps": list(parts.surface_changes),
        "checkpoints": [
            [seq, point.next_turn, point.next_step, sorted(point.pending)] for seq, point in parts.checkpoints.items()
        ],
        "bodyBytes": body_bytes,
    }


def _parts(description: dict[str, Any], ends: bytes) -> LogParts:
    line_ends = array("q")
    line_ends.frombytes(ends)
    if description["bodyBytes"] != (line_ends[-1] if line_ends else 0):
        raise ValueError("the description does not fit the line ends")
    state = LogState(
        count=description["count"],
        last_time=description["lastTime"],
        last_type=description["lastType"],
        last_turn_end_seq=description["lastTurnEndSeq"],
        open_turn=description["openTurn"],
        open_step=description["openStep"],
        next_turn=description["nextTurn"],
        next_step=description["nextStep"],
        pending=set(description["pending"]),
        nodes=[int(seq) for seq in description["nodes"]],
    )
    return LogParts(
        state=state,
        ends=line_ends,
        surface_changes=[(int(seq), int(start), int(end)) for seq, start, end in description["surfaceOps"]],
        checkpoints={
            int(seq): Checkpoint(next_turn, next_step, frozenset(pending))
            for seq, next_turn, next_step, pending in description["checkpoints"]
        },
    )


def read_index(path: Path, ops: FileOps) -> Index | None:
    """The index at ``path``, or None when there is none or it cannot be used."""
    try:
        fd = ops.open(path, os.O_RDONLY)
        try:
            data = ops.read_all(fd)
        finally:
            ops.close(fd)
        head_end = data.index(b"\n")
        head = orjson.loads(data[:head_end])
        if head.get("version") != INDEX_VERSION:
            return None
        return Index(int(head["bodyBytes"]), str(head["digest"]), head["log"], data[head_end + 1 :])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_index(folder: Path, session_id: str, session_log: SessionLog, *, ops: FileOps, sync: bool) -> None:
    """Write ``folder/<id>.idx`` atomically (a temp file renamed in place)."""
    parts = session_log.parts()
    with memoryview(session_log.body_view()) as body:
        head = {
            "version": INDEX_VERSION,
            "bodyBytes": len(body),
            "digest": digest(body),
            "log": _describe(parts, len(body)),
        }
    target = folder / f"{session_id}{INDEX_SUFFIX}"
    temporary = folder / f".{session_id}.{uuid.uuid4().hex[:12]}.tmp"
    fd = ops.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        try:
            ops.write_all(fd, orjson.dumps(head) + b"\n")
            ops.write_all(fd, parts.ends.tobytes())
            if sync:
                ops.fsync(fd)
        finally:
            ops.close(fd)
        ops.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            ops.unlink(temporary)
        raise
