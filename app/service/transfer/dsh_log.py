"""A session's DSH log as bytes, in either of DSH's encodings (spec 10, 16): what ``export`` writes and
``GET /sessions/{id}/log`` answers, and what ``import`` reads.

``none`` is the raw ``.jsonl``: the header line, then every stored line. ``zstd`` is DSH's ``.jsonl.zstd`` of those
very lines: the header line's frame alone, then the event lines in frames of at most
:data:`~app.domain.dsh_frames.FRAME_TEXT_BOUND` bytes of text, so a log of any size is encoded a frame at a time
(never built whole) and DSH's own backend loads the result. A file to import says its encoding by its content (the
zstd magic number), not by its name.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Literal, get_args

from app.domain.dsh_frames import FRAME_TEXT_BOUND, DamagedFrames, decode_log, encode_frame, is_zstd
from app.domain.dsh_records import export_header
from app.domain.session import SessionHeader
from app.service.errors import TransferFailed

__all__ = ["ENCODINGS", "LogEncoding", "log_text", "log_with_header"]

LogEncoding = Literal["none", "zstd"]
ENCODINGS: tuple[LogEncoding, ...] = get_args(LogEncoding)


async def log_with_header(
    header: SessionHeader, lines: AsyncIterable[bytes], encoding: LogEncoding
) -> AsyncIterator[bytes]:
    """The log of ``header`` whose event lines come in the pieces of ``lines`` (cut anywhere), encoded as
    ``encoding`` asks, a piece at a time (a zstd frame holds whole lines)."""
    if encoding == "none":
        yield export_header(header)
        async for piece in lines:
            yield piece
        return
    yield encode_frame(export_header(header))
    pending = bytearray()
    async for piece in lines:
        pending += piece
        while len(pending) >= FRAME_TEXT_BOUND:
            cut = pending.rfind(b"\n", 0, FRAME_TEXT_BOUND)
            if cut < 0:
                cut = pending.find(b"\n", FRAME_TEXT_BOUND)  # a line longer than the bound is a frame of its own
                if cut < 0:
                    break
            yield encode_frame(bytes(pending[: cut + 1]))
            del pending[: cut + 1]
    if pending:
        yield encode_frame(bytes(pending))


def log_text(data: bytes) -> bytes:
    """The lines (header line first) a DSH log file holds, raw ``.jsonl`` or ``.jsonl.zstd`` (told by its first
    bytes); TransferFailed, with the damage and where it is, for a compressed file that is not whole and intact."""
    if not is_zstd(data):
        return data
    try:
        return decode_log(data)
    except DamagedFrames as damage:
        raise TransferFailed(f"the file is not an intact .jsonl.zstd log: {damage}") from None
