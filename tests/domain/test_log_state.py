"""The state a batch is staged on is a copy of the committed one: every field carried over, nothing shared that the
staging may change, and nothing read from the committed state kept as if it were the copy's."""

from __future__ import annotations

import dataclasses

from app.domain.log_state import NO_PENDING, LogState
from app.domain.session import head_of


def a_state_with_every_field_set() -> LogState:
    state = LogState(
        count=7,
        last_time=1_700_000_000_123,
        last_type="turn/end",
        last_turn_end_seq=6,
        open_turn=None,
        open_step=None,
        next_turn=2,
        next_step=3,
        pending=frozenset({"call-1"}),
        nodes=[0, 2, 5],
        nodes_shared=False,
        body_bytes=912,
        title="a title",
        title_seq=4,
        preview="go",
        preview_seq=0,
    )
    state.freeze()
    return state


def test_a_staged_copy_carries_every_field_and_is_not_final() -> None:
    committed = a_state_with_every_field_set()
    head_of(committed)  # kept with the committed state: it must not pass to the copy
    copy = committed.staged()
    for field in dataclasses.fields(LogState):
        value = getattr(copy, field.name)  # an unset slot raises AttributeError
        if field.name == "nodes_shared":
            assert value is True
        elif field.name == "final":
            assert value is False
        elif field.name == "head_kept":
            assert value is None
        else:
            assert value == getattr(committed, field.name), field.name
    assert copy.nodes is committed.nodes and copy.own_nodes() is not committed.nodes


def test_a_staged_copy_that_grows_reads_its_own_head() -> None:
    committed = a_state_with_every_field_set()
    assert head_of(committed) is head_of(committed)  # final: read once
    copy = committed.staged()
    copy.count += 1
    copy.body_bytes += 40
    copy.last_type = "assistant/chunk"
    copy.freeze()
    head = head_of(copy)
    assert (head.count, head.body_bytes, head.last_type) == (8, 952, "assistant/chunk")
    assert head_of(committed).count == 7


def test_a_state_being_built_is_read_anew_each_time() -> None:
    state = LogState()
    assert head_of(state).count == 0
    state.count = 1
    assert head_of(state).count == 1
    assert state.pending is NO_PENDING
