"""SessionLog's readers: a log read as one JSON array, whole or in pieces, is its events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from app.api.wire.resources import json_array_pieces
from app.domain.log import FORK_SEAL_BYTES, SEAL_BYTES, SessionLog
from tests.domain.builders import turns


def log_of(count: int) -> SessionLog:
    log = SessionLog()
    if count:
        log.commit(log.stage(turns(count), appended=True, now=1_000))
    return log


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 4096, 1 << 22])
@pytest.mark.parametrize("turn_count", [0, 1, 5])
def test_the_lines_in_pieces_are_the_whole_lines_and_as_an_array_the_events(chunk_bytes: int, turn_count: int) -> None:
    log = log_of(turn_count)
    pieces = list(log.line_chunks(chunk_bytes))
    assert b"".join(pieces) == log.lines()

    async def as_array() -> bytes:
        async def lines() -> AsyncIterator[bytes]:
            for piece in pieces:
                yield piece

        return b"".join([piece async for piece in json_array_pieces(lines())])

    array = asyncio.run(as_array())
    assert array == log.json_array()
    assert orjson.loads(array) == log.events()


class SmallPartsLog(SessionLog):
    """A log that seals its growing part every few hundred bytes, so that small logs have many parts."""

    seal_bytes = 700
    seal_events = 7


def grown(log: SessionLog, events: list[dict[str, object]], per_append: int) -> SessionLog:
    """``log`` with ``events`` appended ``per_append`` at a time (as a client appends them)."""
    for start in range(0, len(events), per_append):
        log.commit(log.stage(events[start : start + per_append], appended=True, now=1_000))
    return log


def observed(log: SessionLog) -> dict[str, object]:
    """Everything a reader can see of a log."""
    count = len(log)
    state = log.state
    return {
        "lines": log.lines(),
        "each": [log.lines(seq, seq + 1) for seq in range(count)],
        "ranges": [log.lines(start, start + 5) for start in range(0, count, 3)],
        "events": [log.event(seq) for seq in range(count)],
        "turn_ends": [seq for seq in range(count) if log.is_turn_end(seq)],
        "histories": [log.history(seq) for seq in range(count) if log.is_turn_end(seq)],
        "history": log.history(),
        "state": (state.count, state.last_time, state.last_type, state.last_turn_end_seq, state.open_turn),
        "rules": (state.open_step, state.next_turn, state.next_step, set(state.pending), state.nodes),
        "pieces": b"".join(log.line_chunks(333)),
        "size": log.byte_size,
    }


SIX_TURNS = turns(6)


@pytest.mark.parametrize("per_append", [1, 3, 40])
def test_a_log_in_many_parts_reads_as_the_same_log_in_one(per_append: int) -> None:
    whole = grown(SessionLog(), SIX_TURNS, 1000)
    parted = grown(SmallPartsLog(), SIX_TURNS, per_append)
    assert len(parted._sealed) >= 2  # the case under test: sealed parts
    assert observed(parted) == observed(whole)
    assert b"".join(parted.body_pieces()) == whole.lines()


@pytest.mark.parametrize("per_append", [1, 4, 1000])
def test_every_prefix_of_a_log_in_parts_is_that_prefix_and_grows_on_its_own(per_append: int) -> None:
    source = grown(SmallPartsLog(), SIX_TURNS, per_append)
    whole = grown(SessionLog(), SIX_TURNS, 1000)
    boundaries = [seq + 1 for seq in range(len(source)) if source.is_turn_end(seq)]
    for count in [0, *boundaries]:
        child = source.prefix(count)
        expected = whole.prefix(count)
        assert observed(child) == observed(expected), count
        # The child grows on its own, and neither log sees the other's appends.
        before = source.lines()
        follow = turns(2, first=child.state.next_turn)
        grown(child, follow, 3)
        grown(expected, follow, 1000)
        assert observed(child) == observed(expected), count
        assert source.lines() == before
    grown(source, turns(1, first=7), 2)
    assert source.lines().startswith(before)


def test_forks_of_a_large_growing_part_share_its_bytes_instead_of_copying_them_each() -> None:
    events = turns(300)
    source = grown(SessionLog(), events, 50)
    assert FORK_SEAL_BYTES <= source.byte_size < SEAL_BYTES and not source._sealed  # one growing part, large
    count = len(source)
    first, second = source.prefix(count), source.prefix(count)
    # Both children hold the seed through views of one buffer, and read as the source read.
    assert first._sealed[-1].body.obj is second._sealed[-1].body.obj  # type: ignore[union-attr]
    assert observed(first) == observed(second) == observed(grown(SessionLog(), events, 1000))
    # Each grows on its own, and the source appends on without changing what they share.
    follow = turns(2, first=source.state.next_turn)
    seed = source.lines()
    grown(source, follow, 3)
    grown(first, follow, 1)
    assert second.lines() == seed and first.lines() == source.lines()
