"""SessionLog's readers: a log read as one JSON array, whole or in pieces, is its events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest

from app.api.wire import json_array_pieces
from app.domain.log import SessionLog
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
