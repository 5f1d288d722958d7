"""DSH's .jsonl.zstd frames (spec 16): what a log's frames hold, and how a walk tells a torn frame from damage."""

from __future__ import annotations

import pytest
import zstandard

from app.domain.dsh_frames import (
    MAGIC,
    DamagedFrames,
    decode_log,
    encode_frame,
    encode_lines,
    encode_log,
    is_zstd,
    walk_frames,
)

HEADER = b'{"type":"session","version":0,"id":"s1","createdAt":1,"delegationDepth":0}\n'
BODY = b"".join(b'{"type":"turn/start","seq":%d,"time":5,"data":{"turn":%d}}\n' % (i, i) for i in range(2000))


def test_a_frame_carries_its_content_checksum_and_size() -> None:
    frame = encode_frame(b"one\ntwo\n")
    parameters = zstandard.get_frame_parameters(frame)
    assert parameters.has_checksum
    assert parameters.content_size == len(b"one\ntwo\n")
    assert zstandard.ZstdDecompressor().decompress(frame) == b"one\ntwo\n"


def test_a_frame_holds_whole_lines_only() -> None:
    with pytest.raises(ValueError, match="whole lines"):
        encode_frame(b"no newline")


def test_a_log_is_its_header_frame_alone_then_the_body_in_frames() -> None:
    log = encode_log(HEADER, BODY, bound=16 * 1024)
    walk = walk_frames(log)
    assert walk.torn_at is None
    assert walk.frames[0].text == HEADER
    assert len(walk.frames) > 2, "a body past the bound is split into several frames"
    assert all(len(frame.text) <= 16 * 1024 for frame in walk.frames)
    assert all(frame.text.endswith(b"\n") for frame in walk.frames)
    assert walk.text == HEADER + BODY
    assert decode_log(log) == HEADER + BODY
    assert walk.intact_end == len(log)


def test_the_log_is_what_zstd_itself_reads_as_concatenated_frames() -> None:
    log = encode_log(HEADER, BODY, bound=4096)
    reader = zstandard.ZstdDecompressor().stream_reader(log, read_across_frames=True)
    assert reader.read() == HEADER + BODY


def test_frame_offsets_name_where_each_frame_starts() -> None:
    log = encode_log(HEADER, BODY, bound=8192)
    walk = walk_frames(log)
    for frame in walk.frames:
        assert log[frame.offset : frame.offset + 4] == MAGIC
        assert zstandard.ZstdDecompressor().decompress(log[frame.offset : frame.end]) == frame.text
    resumed = walk_frames(log, walk.frames[3].offset)
    assert resumed.frames == walk.frames[3:]


def test_a_line_longer_than_the_bound_is_one_frame_of_its_own() -> None:
    long_line = b'{"x":"' + b"a" * 5000 + b'"}\n'
    body = b"short\n" + long_line + b"short\n"
    walk = walk_frames(encode_log(HEADER, body, bound=100))
    assert [frame.text for frame in walk.frames[1:]] == [b"short\n", long_line, b"short\n"]


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 9, 20, -4, -1])
def test_a_final_frame_cut_anywhere_is_torn_not_damaged(cut: int) -> None:
    lines = BODY.splitlines(keepends=True)
    first, second = b"".join(lines[:5]), b"".join(lines[5:80])
    intact = encode_log(HEADER, first)
    last = encode_frame(second)
    cut_at = cut if cut > 0 else len(last) + cut
    walk = walk_frames(intact + last[:cut_at])
    assert walk.torn_at == len(intact)
    assert walk.intact_end == len(intact)
    assert walk.text == HEADER + first
    with pytest.raises(DamagedFrames, match="cut off"):
        decode_log(intact + last[:cut_at])


def test_a_flipped_byte_in_a_complete_frame_is_damage_not_a_torn_tail() -> None:
    log = bytearray(encode_log(HEADER, BODY, bound=8192))
    middle = walk_frames(bytes(log)).frames[2]
    log[middle.offset + middle.length // 2] ^= 0x40
    with pytest.raises(DamagedFrames) as raised:
        walk_frames(bytes(log))
    assert raised.value.offset <= middle.offset + middle.length


def test_a_wrong_checksum_is_damage() -> None:
    frame = bytearray(encode_frame(b"line\n"))
    frame[-1] ^= 0xFF
    with pytest.raises(DamagedFrames, match="does not decompress"):
        walk_frames(encode_frame(HEADER) + bytes(frame))


def test_bytes_that_are_not_a_frame_are_damage() -> None:
    with pytest.raises(DamagedFrames, match="not a zstd frame") as raised:
        walk_frames(encode_frame(HEADER) + b'{"type":"turn/start"}\n')
    assert raised.value.offset == len(encode_frame(HEADER))


def test_raw_jsonl_is_not_zstd() -> None:
    assert not is_zstd(HEADER + BODY)
    assert is_zstd(encode_log(HEADER, BODY))
    with pytest.raises(DamagedFrames, match="not a zstd frame"):
        decode_log(HEADER + BODY)


def test_a_frame_whose_text_does_not_end_in_a_newline_is_damage() -> None:
    partial_line = zstandard.ZstdCompressor(write_checksum=True).compress(b'{"type":"x"')
    with pytest.raises(DamagedFrames, match="does not end in a newline"):
        walk_frames(encode_frame(HEADER) + partial_line)


def test_an_empty_frame_is_damage() -> None:
    with pytest.raises(DamagedFrames, match="empty"):
        walk_frames(encode_frame(HEADER) + zstandard.ZstdCompressor(write_checksum=True).compress(b""))


def test_a_skippable_frame_is_damage() -> None:
    skippable = (0x184D2A50).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    with pytest.raises(DamagedFrames, match="skippable"):
        walk_frames(encode_frame(HEADER) + skippable)


def test_a_frame_without_its_content_size_still_reads() -> None:
    compressor = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False)
    streamed = compressor.compressobj()
    frame = streamed.compress(b"a\nb\n") + streamed.flush()
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decode_log(encode_frame(HEADER) + frame) == HEADER + b"a\nb\n"


def test_a_first_frame_with_more_than_the_header_line_is_refused() -> None:
    with pytest.raises(DamagedFrames, match="header line"):
        decode_log(encode_frame(HEADER + b"more\n"))


def test_empty_data_is_no_frames_and_no_log() -> None:
    assert walk_frames(b"").frames == ()
    with pytest.raises(DamagedFrames, match="empty"):
        decode_log(b"")


def test_encode_lines_of_nothing_is_no_frame() -> None:
    assert encode_lines(b"") == b""


def test_a_damaged_block_size_that_seems_torn_but_has_frames_after_it_is_damage() -> None:
    """A block size made too big makes a middle frame seem to run past the end: its later frames say it is not a
    torn tail, so nothing acknowledged is truncated away."""
    lines = BODY.splitlines(keepends=True)
    middle = encode_frame(b"".join(lines[:40]))
    after = encode_frame(b"".join(lines[40:80]))
    block_header_at = zstandard.frame_header_size(middle)
    assert zstandard.get_frame_parameters(middle).content_size > 255
    damaged = bytearray(middle)
    damaged[block_header_at + 2] = 0xFF  # the block size's top bits
    log = encode_frame(HEADER) + bytes(damaged) + after
    with pytest.raises(DamagedFrames, match="run over"):
        walk_frames(log)
