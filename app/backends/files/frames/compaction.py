"""Compaction: an ended turn's small frames rewritten into one (spec 16, "Bytes at rest").

An append of one event is one frame of its own, which compresses badly (about 0.84x raw on streamed turns): once a
turn has ended, the run of small frames at the end of the file (up to the last ``turn/end``, the frame before them
included while it is small too) is rewritten into one frame of at most ``FRAME_TEXT_BOUND`` bytes of text, at
``COMPACT_LEVEL``. Frames that reach half the bound are left as they are: each turn rewrites at most one bound of
text, and the file stays a run of frames of 128 to 256 KiB of text, then the open turn's.

The rewrite never changes the file in place. The whole file is written anew into ``tmp/`` (the frames before the run
copied in the kernel as they are, the run's text re-encoded, the frames after it copied), synced, given the old
file's mtime (the time of the session's last acknowledged change, which retention counts from), renamed over the
session's file (atomic), and the folder synced. A crash at any instant leaves either file, whole: both hold the same
lines, so every acknowledged event is in the log exactly once and the session is not corrupt; a leftover in
``tmp/`` is removed at the next start. The caller holds the session (no append, fork or delete of it meanwhile).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import uuid
from pathlib import Path

from app.backends.files.disk.fileops import FileOps
from app.backends.files.frames.index import FrameIndex
from app.domain.dsh_frames import COMPACT_LEVEL, FRAME_TEXT_BOUND, DamagedFrames, encode_frames, walk_frames

__all__ = ["SMALL_FRAME_TEXT", "compaction_run", "copy_range", "rewrite"]

logger = logging.getLogger("forklog.storage")

# A frame holding less text than this is small: it is rewritten with the ones after it.
SMALL_FRAME_TEXT = FRAME_TEXT_BOUND // 2


def compaction_run(frames: FrameIndex, ended: int) -> tuple[int, int] | None:
    """The body frames ``start .. stop - 1`` to rewrite into one, when the log's turns have ended at body byte
    ``ended``: the small frames that end by then, back from the last of them, as long as their text fits in one
    bound; None when that is fewer than two frames."""
    stop = frames.whole_frames(ended)
    start = stop
    text = 0
    while start > 0:
        size = frames.text_size(start - 1)
        if size >= SMALL_FRAME_TEXT or text + size > FRAME_TEXT_BOUND:
            break
        text += size
        start -= 1
    return (start, stop) if stop - start >= 2 else None


def copy_range(ops: FileOps, source: int, target: int, offset: int, count: int) -> None:
    """Append ``count`` bytes of ``source`` from ``offset`` to ``target``, in the kernel where it can (a reflink
    where the file system has one), else through this process."""
    while count > 0:
        try:
            copied = ops.copy_file_range(source, target, count, offset)
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            copied = 0
        if copied <= 0:
            chunk = ops.pread(source, min(count, 1 << 20), offset)
            if not chunk:
                raise OSError(errno.EIO, f"the file ends {count} bytes before the frames it holds")
            ops.write_all(target, chunk)
            copied = len(chunk)
        offset += copied
        count -= copied


def rewrite(ops: FileOps, path: Path, tmp: Path, frames: FrameIndex, run: tuple[int, int], *, sync: bool) -> FrameIndex:
    """Rewrite body frames ``run`` of the file at ``path`` into one (see the module's docstring); the new file's
    index. OSError or DamagedFrames (the file as it was) when it cannot be made; once it is renamed in place,
    nothing raises (a failed folder sync is logged: the new file holds what the old one did)."""
    start, stop = run
    begin, end = frames.file_start(start), frames.file_ends[stop - 1]
    temporary = tmp / f"{path.name}.{uuid.uuid4().hex[:12]}.compact"
    source = ops.open(path, os.O_RDONLY)
    try:
        status = ops.fstat(source)
        if status.st_size < frames.file_size:
            raise OSError(errno.EIO, f"{path} is shorter than the frames it holds")
        walk = walk_frames(ops.pread(source, end - begin, begin))
        text = walk.text
        if walk.torn_at is not None or len(text) != frames.body_ends[stop - 1] - frames.body_start(start):
            raise DamagedFrames(begin, "the frames to rewrite are not the ones the session's index names")
        encoded = encode_frames(text, COMPACT_LEVEL)
        target = ops.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                copy_range(ops, source, target, 0, begin)
                for frame, _ in encoded:
                    ops.write_all(target, frame)
                copy_range(ops, source, target, end, frames.file_size - end)
                ops.set_mtime(target, status.st_mtime_ns)
                if sync:
                    ops.fsync(target)
            finally:
                ops.close(target)
            ops.rename(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                ops.unlink(temporary)
            raise
    finally:
        ops.close(source)
    if sync:
        try:
            ops.fsync_dir(path.parent)
        except OSError as exc:  # either file holds the same lines: a crash now loses nothing
            logger.warning("could not sync %s after compacting %s: %s", path.parent, path.name, exc.strerror)
    return frames.replaced(start, stop, ((len(frame), size) for frame, size in encoded))
