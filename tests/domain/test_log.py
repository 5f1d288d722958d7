"""SessionLog's readers: a log read as one JSON array, whole or in pieces, is its events."""

from __future__ import annotations

import orjson
import pytest

from app.domain.log import SessionLog
from tests.domain.builders import turns


def log_of(count: int) -> SessionLog:
    log = SessionLog()
    if count:
        log.commit(log.stage(turns(count), appended=True, now=1_000))
    return log


@pytest.mark.parametrize("chunk_bytes", [1, 7, 64, 4096, 1 << 22])
@pytest.mark.parametrize("turn_count", [0, 1, 5])
def test_the_array_in_pieces_is_the_whole_array(chunk_bytes: int, turn_count: int) -> None:
    log = log_of(turn_count)
    pieces = b"".join(bytes(piece) for piece in log.json_array_chunks(chunk_bytes))
    assert pieces == log.json_array()
    assert orjson.loads(pieces) == log.events()
    assert len(orjson.loads(pieces)) == len(log)
