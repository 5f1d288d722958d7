"""The text of a compressed session file as a start reads it (spec 16, "Recovery"): its frames walked and
decompressed, a torn final frame left out, any other damage refused."""

from __future__ import annotations

from dataclasses import dataclass

from app.backends.files.frames.index import FrameIndex
from app.domain.dsh_frames import DamagedFrames, walk_frames

__all__ = ["DecodedFile", "decode_file", "intact_text"]


@dataclass(frozen=True, slots=True)
class DecodedFile:
    """What a ``.jsonl.zstd`` file holds: the text of its whole frames (header line, then lines), where those
    frames end, and where a torn final frame starts (None: there is none)."""

    text: bytes
    frames: FrameIndex | None
    torn_at: int | None


def decode_file(data: bytes) -> DecodedFile:
    """``data``'s text and frames; :class:`DamagedFrames` for damage other than a torn final frame, and for a first
    frame that holds more than the header line. A file without a whole first frame has no text (and no header)."""
    walk = walk_frames(data)
    if not walk.frames:
        return DecodedFile(b"", None, walk.torn_at)
    header = walk.frames[0]
    if header.text.count(b"\n") != 1:
        raise DamagedFrames(0, "the first zstd frame holds more than the header line")
    index = FrameIndex(header.end, ((frame.length, len(frame.text)) for frame in walk.frames[1:]))
    return DecodedFile(walk.text, index, walk.torn_at)


def intact_text(data: bytes) -> tuple[bytes, str | None]:
    """The text of ``data``'s frames up to the first damaged one (what ``export --salvage`` can keep), and why the
    rest was left out (None: nothing was, but a torn final frame)."""
    try:
        return walk_frames(data).text, None
    except DamagedFrames as damage:
        return walk_frames(data[: damage.offset]).text, f"damaged zstd frames: {damage}"
