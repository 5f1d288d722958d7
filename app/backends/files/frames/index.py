"""Where the frames of a compressed session file end: in the file, and in the text they hold.

A ``.jsonl.zstd`` file is its header's frame, then frames of whole lines (:mod:`app.domain.dsh_frames`). A fork
copies the whole frames of its seed as they are stored and re-encodes only the one its boundary falls in; a
compaction rewrites a run of small frames into one. Both need, for each frame, the byte of the file it ends at and
the byte of the body text (the lines after the header, as the log's offsets count them) it ends at: the index keeps
them as two flat arrays, 16 bytes a frame. A session is given its index when it is first forked or compacted
(:func:`index_of` reads it off the frames' headers), not at a start: an idle session costs no index.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterable

import zstandard

from app.domain.dsh_frames import DamagedFrames, decompress_frame, frame_end

__all__ = ["FrameIndex", "index_of"]


class FrameIndex:
    """The frames of one compressed file: the header's frame ends at ``header_end``, body frame ``i`` at file byte
    ``file_ends[i]`` and body byte ``body_ends[i]``."""

    __slots__ = ("body_ends", "file_ends", "header_end")

    def __init__(self, header_end: int, frames: Iterable[tuple[int, int]] = ()) -> None:
        """``frames``: each body frame's (length in the file, length of its text), in order."""
        self.header_end = header_end
        self.file_ends = array("q")
        self.body_ends = array("q")
        for length, text_length in frames:
            self.add(length, text_length)

    def __len__(self) -> int:
        """How many body frames."""
        return len(self.file_ends)

    @property
    def file_size(self) -> int:
        return self.file_ends[-1] if self.file_ends else self.header_end

    @property
    def body_size(self) -> int:
        return self.body_ends[-1] if self.body_ends else 0

    def add(self, length: int, text_length: int) -> None:
        """A frame appended after the last."""
        self.file_ends.append(self.file_size + length)
        self.body_ends.append(self.body_size + text_length)

    def file_start(self, frame: int) -> int:
        return self.file_ends[frame - 1] if frame > 0 else self.header_end

    def body_start(self, frame: int) -> int:
        return self.body_ends[frame - 1] if frame > 0 else 0

    def text_size(self, frame: int) -> int:
        return self.body_ends[frame] - self.body_start(frame)

    def whole_frames(self, body_offset: int) -> int:
        """How many body frames end at or before ``body_offset`` (the frames a prefix of that many body bytes holds
        whole)."""
        return bisect_right(self.body_ends, body_offset)

    def replaced(self, start: int, stop: int, frames: Iterable[tuple[int, int]]) -> FrameIndex:
        """The index of the file once body frames ``start .. stop - 1`` are replaced by ``frames`` (each a (length
        in the file, text length)) holding the same text; the frames after them move by the change in length."""
        index = FrameIndex(self.header_end)
        for frame in range(start):
            index.add(self.file_ends[frame] - self.file_start(frame), self.text_size(frame))
        for length, text_length in frames:
            index.add(length, text_length)
        if index.body_size != self.body_start(stop):
            raise ValueError("replacement frames must hold the text of the frames they replace")
        for frame in range(stop, len(self)):
            index.add(self.file_ends[frame] - self.file_start(frame), self.text_size(frame))
        return index

    def prefix(self, header_end: int, frames: int) -> FrameIndex:
        """The index of a file whose header's frame ends at ``header_end``, holding this file's first ``frames``
        body frames as they are."""
        index = FrameIndex(header_end)
        for frame in range(frames):
            index.add(self.file_ends[frame] - self.file_start(frame), self.text_size(frame))
        return index


def index_of(data: bytes, body_size: int) -> FrameIndex | None:
    """The index of the frames of a compressed file's ``data`` that hold its first ``body_size`` body bytes (what
    the session's log holds; a refused batch not cut away yet may follow them), read off the frames' headers; None
    when the frames do not end exactly there, or are damaged."""
    try:
        end = frame_end(data, 0)
        if end is None:
            return None
        index = FrameIndex(end)
        while index.body_size < body_size:
            start = index.file_size
            end = frame_end(data, start)
            if end is None:
                return None
            size = zstandard.get_frame_parameters(data[start : start + 18]).content_size
            if size == zstandard.CONTENTSIZE_UNKNOWN:  # a frame another writer made: its text says
                size = len(decompress_frame(data[start:end], start))
            index.add(end - start, size)
    except (DamagedFrames, zstandard.ZstdError):
        return None
    return index if index.body_size == body_size else None
