"""SessionLog's readers: a log read as one JSON array, whole or in pieces, is its events."""

from __future__ import annotations

import orjson
import pytest

from app.domain.errors import EventRejected
from app.domain.log import SessionLog
from tests.domain.builders import (
    assistant_message,
    replace,
    step_end,
    step_start,
    turn_end,
    turn_start,
    turns,
    user_message,
)


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


def _resumed(log: SessionLog) -> SessionLog:
    description, ends = log.export()
    # The description travels as JSON (the index file): resume from what JSON gives back.
    return SessionLog.resume(bytearray(log.lines()), orjson.loads(orjson.dumps(description)), ends)


def test_a_resumed_log_is_the_log_it_was_exported_from() -> None:
    log = log_of(4)
    first, second = log.state.nodes[:2]
    replacement = user_message("summary", surface_op=replace(first, second), sourceEventSeqs=[first, second])
    log.commit(log.stage([replacement, turn_start(5), step_start(5, 1)], appended=True, now=2_000))
    resumed = _resumed(log)
    assert resumed.lines() == log.lines()
    assert resumed.history() == log.history()
    assert [resumed.history(seq) for seq in range(len(log)) if log.is_turn_end(seq)] == [
        log.history(seq) for seq in range(len(log)) if log.is_turn_end(seq)
    ]
    assert (resumed.state.open_turn, resumed.state.open_step, resumed.state.next_step) == (5, 1, 1)
    # It goes on exactly as the original would: the same next events are accepted, the same wrong ones refused.
    follow = [assistant_message(5, 1), step_end(5, 1), turn_end(5)]
    for target in (log, resumed):
        target.commit(target.stage(follow, appended=True, now=3_000))
    assert resumed.lines() == log.lines()
    assert resumed.prefix(len(log)).history() == log.prefix(len(log)).history()
    with pytest.raises(EventRejected):
        resumed.stage([turn_start(5)], appended=True, now=4_000)


def test_a_description_that_does_not_fit_the_body_is_refused() -> None:
    log = log_of(2)
    description, ends = log.export()
    with pytest.raises(ValueError):
        SessionLog.resume(bytearray(log.lines()[:-1]), description, ends)
