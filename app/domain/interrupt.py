"""An interrupt (spec 17): the events that close a log's open turn, or the refusal when no turn is open."""

from __future__ import annotations

from typing import Any

from app.domain.closers import interrupted_turn_closers
from app.domain.errors import ErrorCode, SessionError
from app.domain.log_state import LogState

__all__ = ["closers_for", "not_in_turn"]


def not_in_turn(state: LogState) -> SessionError:
    last = state.last_turn_end_seq
    return SessionError(
        ErrorCode.NOT_IN_TURN,
        "no turn is open: there is nothing to interrupt"
        + (f" (the last turn ended at seq {last})" if last is not None else " (the log holds no turn)"),
        lastTurnEndSeq=last,
    )


def closers_for(state: LogState) -> list[dict[str, Any]]:
    """The events an interrupt appends to the log behind ``state`` (DSH's ``interruptedTurnClosers``), as an append
    sends them; NOT_IN_TURN when no turn is open."""
    if state.open_turn is None:
        raise not_in_turn(state)
    return interrupted_turn_closers(state.open_turn, state.open_step, state.unanswered, state.count)
