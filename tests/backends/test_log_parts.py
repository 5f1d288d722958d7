"""A log's parts (what a backend keeps of it besides its bytes): a log resumed from them is the same log."""

from __future__ import annotations

import pytest

from app.backends.log_parts import log_parts, log_since, resume_log
from app.domain.log import SessionLog
from tests.domain.builders import turns
from tests.domain.test_log import SIX_TURNS, SmallPartsLog, grown, observed


def test_a_log_resumed_from_its_parts_is_the_same_log() -> None:
    for log in (grown(SmallPartsLog(), SIX_TURNS, 2), grown(SessionLog(), SIX_TURNS, 5), SessionLog()):
        body = log.lines()
        for resumed in (resume_log(body, log_parts(log)), resume_log(memoryview(body), log_parts(log), SmallPartsLog)):
            assert observed(resumed) == observed(log)
            grown(resumed, turns(1, first=log.state.next_turn), 3)
            assert resumed.lines().startswith(body)


def test_parts_that_do_not_fit_the_body_are_refused() -> None:
    log = grown(SessionLog(), SIX_TURNS, 100)
    body = log.lines()
    with pytest.raises(ValueError):
        resume_log(body[:-1], log_parts(log))
    with pytest.raises(ValueError):
        resume_log(body + body, log_parts(log))


def test_what_a_log_held_past_a_point_is_the_rest_of_it() -> None:
    log = grown(SmallPartsLog(), SIX_TURNS, 3)
    whole = log_parts(log)
    for start in range(len(log)):
        delta = log_since(log, start, body_from=log.offset(start) // 2)
        assert b"".join(delta.body) == log.lines()[log.offset(start) // 2 :]
        assert delta.body_start == log.offset(start)
        assert list(delta.parts.ends) == list(whole.ends)[start:]
        kept = [index for index in range(0, len(whole.surface), 3) if whole.surface[index] >= start]
        assert list(delta.parts.surface) == [whole.surface[index + k] for index in kept for k in range(3)]
        assert list(delta.parts.turn_ends) == [seq for seq in whole.turn_ends if seq >= start]
