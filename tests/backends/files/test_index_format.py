"""Index files: a log resumed from its index is the log it was indexed from, and an index that does not fit its
file's bytes is never used."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backends.files.fileops import FileOps
from app.backends.files.index import read_index, write_index
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


def _resumed(log: SessionLog, folder: Path, body: bytes | None = None) -> SessionLog | None:
    ops = FileOps()
    write_index(folder, "s", log, ops=ops, sync=False)
    index = read_index(folder / "s.idx", ops)
    assert index is not None
    return index.resume(log.lines() if body is None else body)


def test_a_resumed_log_is_the_log_it_was_indexed_from(tmp_path: Path) -> None:
    log = log_of(4)
    first, second = log.state.nodes[:2]
    replacement = user_message("summary", surface_op=replace(first, second), sourceEventSeqs=[first, second])
    log.commit(log.stage([replacement, turn_start(5), step_start(5, 1)], appended=True, now=2_000))
    resumed = _resumed(log, tmp_path)
    assert resumed is not None
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


def test_an_index_whose_bytes_differ_from_the_file_is_not_used(tmp_path: Path) -> None:
    log = log_of(2)
    assert _resumed(log, tmp_path, log.lines()[:-1]) is None
    assert _resumed(log, tmp_path, log.lines().replace(b'"turn":1', b'"turn":7', 1)) is None
