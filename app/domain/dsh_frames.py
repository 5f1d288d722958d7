"""DSH's ``.jsonl.zstd`` session logs, pure: the frames of spec 16, bytes in and bytes out.

A compressed log is a concatenation of independent Zstandard frames (RFC 8878), each with its content checksum and
content size: the first holds exactly the header line, every later one whole lines (each ending in ``\\n``), the
lines the raw ``.jsonl`` would hold. libzstd (through ``zstandard``) compresses, decompresses and checks each
frame; the one thing done here by hand is walking a frame's header and block headers to find where it ends (no
binding exposes ``ZSTD_findFrameCompressedSize``), which is what tells a torn final frame from damage.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import zstandard

__all__ = [
    "COMPACT_LEVEL",
    "DEFAULT_LEVEL",
    "FRAME_TEXT_BOUND",
    "MAGIC",
    "DamagedFrames",
    "Frame",
    "FrameWalk",
    "decode_log",
    "decompress_frame",
    "encode_frame",
    "encode_frames",
    "encode_lines",
    "encode_log",
    "frame_end",
    "is_zstd",
    "walk_frames",
]

MAGIC = b"\x28\xb5\x2f\xfd"
# zstd's default level: an append's frame (and a fork's boundary frame) is on the path of a request, so speed wins.
DEFAULT_LEVEL = 3
# A rewrite of an ended turn's frames (compaction) runs once a turn, off the path of most appends: a higher level
# buys about a seventh fewer bytes at rest (0.062x raw against 0.073x, 256 KiB frames of streamed turns) for about
# 16 ms a MB of text, paid once.
COMPACT_LEVEL = 6
# The most text one frame of a log holds when lines are packed into frames (a whole log, a compaction): a fork
# re-encodes only the frame its boundary falls in, so a bounded frame keeps that cost small, while 256 KiB is
# already far past where a bigger frame would compress better.
FRAME_TEXT_BOUND = 256 * 1024

_SKIPPABLE_MAGIC_MASK = 0xFFFFFFF0
_SKIPPABLE_MAGIC = 0x184D2A50
_RESERVED_BLOCK = 3
_RLE_BLOCK = 1
_BLOCK_HEADER = 3
_CHECKSUM = 4


class DamagedFrames(ValueError):
    """Bytes that are not a complete, intact ``.jsonl.zstd`` log at ``offset``: its callers turn it into what they
    answer (a corrupt session, an import's refusal), so it is a plain ``ValueError`` like ``MalformedRecord``."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"{reason} (at byte {offset})")
        self.offset = offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Frame:
    """One complete frame of a log: where it starts in the file, how many bytes it takes, and its text."""

    offset: int
    length: int
    text: bytes

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True, slots=True)
class FrameWalk:
    """The complete frames of a log in order, and where a torn final frame starts (``None``: there is none).
    ``intact_end`` is the byte after the last complete frame: what a recovery truncates the file to."""

    frames: tuple[Frame, ...]
    torn_at: int | None

    @property
    def intact_end(self) -> int:
        return self.frames[-1].end if self.frames else 0

    @property
    def text(self) -> bytes:
        return b"".join(frame.text for frame in self.frames)


# A ZstdCompressor/ZstdDecompressor keeps a libzstd context, which is expensive to make and not safe to share
# between threads: one of each per thread and level.
_local = threading.local()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    compressors: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "compressors", None)
    if compressors is None:
        compressors = _local.compressors = {}
    compressor = compressors.get(level)
    if compressor is None:
        compressor = compressors[level] = zstandard.ZstdCompressor(
            level=level, write_checksum=True, write_content_size=True
        )
    return compressor


def _decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def is_zstd(data: bytes) -> bool:
    """Whether ``data`` starts as a Zstandard frame does (its magic number): how a file says its encoding."""
    return data[:4] == MAGIC


def encode_frame(text: bytes, level: int = DEFAULT_LEVEL) -> bytes:
    """One independent frame of ``text`` (whole lines), with its content checksum and content size."""
    if text and not text.endswith(b"\n"):
        raise ValueError("a frame holds whole lines: its text must end in a newline")
    return _compressor(level).compress(text)


def _line_runs(body: bytes, bound: int) -> Iterator[bytes]:
    """``body``'s whole lines in runs of at most ``bound`` bytes (a longer line is a run of its own)."""
    start = 0
    size = len(body)
    while start < size:
        if size - start <= bound:
            yield body[start:]
            return
        cut = body.rfind(b"\n", start, start + bound)
        if cut < 0:
            cut = body.find(b"\n", start + bound)
            if cut < 0:
                cut = size - 1
        yield body[start : cut + 1]
        start = cut + 1


def encode_frames(body: bytes, level: int = DEFAULT_LEVEL, bound: int = FRAME_TEXT_BOUND) -> list[tuple[bytes, int]]:
    """``body``'s lines as frames of at most ``bound`` bytes of text each (a longer line is a frame of its own),
    each with the length of its text: what a writer needs to know where each frame ends."""
    return [(encode_frame(run, level), len(run)) for run in _line_runs(body, bound)]


def encode_lines(body: bytes, level: int = DEFAULT_LEVEL, bound: int = FRAME_TEXT_BOUND) -> bytes:
    """``body``'s lines as frames of at most ``bound`` bytes of text each (none for an empty body)."""
    return b"".join(encode_frame(run, level) for run in _line_runs(body, bound))


def encode_log(header_line: bytes, body: bytes, level: int = DEFAULT_LEVEL, bound: int = FRAME_TEXT_BOUND) -> bytes:
    """A whole ``.jsonl.zstd`` log: the header line's frame alone, then the body's lines in bounded frames."""
    if header_line.count(b"\n") != 1 or not header_line.endswith(b"\n"):
        raise ValueError("the header frame holds exactly the header line")
    return encode_frame(header_line, level) + encode_lines(body, level, bound)


def frame_end(data: bytes, offset: int) -> int | None:
    """Where the frame starting at ``offset`` ends, or ``None`` when ``data`` ends before it does (a torn frame).

    Walks the frame header and the block headers of RFC 8878 section 3.1.1; raises :class:`DamagedFrames` for bytes
    that cannot be a frame (another magic, a reserved bit or block type).
    """
    size = len(data)
    if size - offset < 4:
        if MAGIC.startswith(data[offset:]):
            return None
        raise DamagedFrames(offset, "not a zstd frame")
    magic = int.from_bytes(data[offset : offset + 4], "little")
    if data[offset : offset + 4] != MAGIC:
        if magic & _SKIPPABLE_MAGIC_MASK == _SKIPPABLE_MAGIC:
            raise DamagedFrames(offset, "a skippable zstd frame, which a session log never holds")
        raise DamagedFrames(offset, "not a zstd frame")
    position = offset + 4
    if position >= size:
        return None
    descriptor = data[position]
    if descriptor & 0x08:
        raise DamagedFrames(offset, "a zstd frame header with its reserved bit set")
    content_size_flag = descriptor >> 6
    single_segment = bool(descriptor & 0x20)
    has_checksum = bool(descriptor & 0x04)
    dictionary_id_size = (0, 1, 2, 4)[descriptor & 0x03]
    content_size_size = (1 if single_segment else 0, 2, 4, 8)[content_size_flag]
    position += 1 + (0 if single_segment else 1) + dictionary_id_size + content_size_size
    while True:
        if position + _BLOCK_HEADER > size:
            return None
        block_header = int.from_bytes(data[position : position + _BLOCK_HEADER], "little")
        last = block_header & 1
        block_type = (block_header >> 1) & 0x03
        if block_type == _RESERVED_BLOCK:
            raise DamagedFrames(offset, "a zstd block of the reserved type")
        position += _BLOCK_HEADER + (1 if block_type == _RLE_BLOCK else block_header >> 3)
        if last:
            break
    if has_checksum:
        position += _CHECKSUM
    return position if position <= size else None


def decompress_frame(frame: bytes, offset: int = 0) -> bytes:
    """The text of one complete frame, its checksum checked by libzstd; :class:`DamagedFrames` when it fails."""
    try:
        parameters = zstandard.get_frame_parameters(frame)
        if parameters.content_size == zstandard.CONTENTSIZE_UNKNOWN:
            # a frame another writer made without its content size: stream it (``decompress`` needs the size)
            stream = _decompressor().decompressobj()
            text = stream.decompress(frame)
            if not stream.eof:
                raise DamagedFrames(offset, "a zstd frame that does not end where its blocks do")
            return text
        return _decompressor().decompress(frame)
    except zstandard.ZstdError as error:
        raise DamagedFrames(offset, f"a zstd frame that does not decompress ({error})") from None


def walk_frames(data: bytes, start: int = 0) -> FrameWalk:
    """The complete frames of ``data`` from ``start`` on, in order, and where a torn final frame starts.

    Raises :class:`DamagedFrames` for any other damage: bytes that are not a frame, a checksum or decompression
    failure in a complete frame, a frame whose text does not end in a newline (or is empty).
    """
    frames: list[Frame] = []
    offset = start
    size = len(data)
    view = memoryview(data)
    while offset < size:
        end = frame_end(data, offset)
        if end is None:
            _refuse_frames_after(data, offset)
            return FrameWalk(tuple(frames), offset)
        text = decompress_frame(bytes(view[offset:end]), offset)
        if not text.endswith(b"\n"):
            reason = "an empty zstd frame" if not text else "a zstd frame whose text does not end in a newline"
            raise DamagedFrames(offset, reason)
        frames.append(Frame(offset, end - offset, text))
        offset = end
    return FrameWalk(tuple(frames), None)


def _refuse_frames_after(data: bytes, torn_at: int) -> None:
    """A torn write leaves one partial frame at the very end; a damaged block size in an earlier frame reads the
    same way (its frame seems to run past the end) but has whole frames after it, which would be lost with it."""
    probe = data.find(MAGIC, torn_at + 4)
    while probe >= 0:
        try:
            end = frame_end(data, probe)
            if end is not None:
                decompress_frame(data[probe:end], probe)
                raise DamagedFrames(torn_at, "a zstd frame whose blocks run over the frames after it")
        except DamagedFrames as error:
            if error.offset == torn_at:
                raise
        probe = data.find(MAGIC, probe + 1)


def decode_log(data: bytes) -> bytes:
    """The whole text (header line and then every line) of a ``.jsonl.zstd`` log; :class:`DamagedFrames` for any
    damage, a torn final frame included, and for a first frame that is not exactly one line."""
    walk = walk_frames(data)
    if walk.torn_at is not None:
        raise DamagedFrames(walk.torn_at, "a zstd frame cut off before its end")
    if not walk.frames:
        raise DamagedFrames(0, "an empty log, without its header frame")
    if walk.frames[0].text.count(b"\n") != 1:
        raise DamagedFrames(0, "a first zstd frame that holds more than the header line")
    return walk.text
