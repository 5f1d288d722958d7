"""Valid events and turns for the HTTP tests.

Appended events carry no ``seq``/``time`` (the server assigns them); :func:`as_seed` numbers a list for a seed.
"""

from __future__ import annotations

from typing import Any

from tests.events import (
    Event,
    assistant_message,
    message_id,
    step_end,
    step_start,
    tool_call,
    tool_result,
    turn_end,
    turn_start,
    user_message,
)

__all__ = [
    "TURN_LENGTH",
    "Event",
    "as_seed",
    "assistant_message",
    "close_turn",
    "nested_list",
    "note",
    "open_turn",
    "step_end",
    "step_start",
    "text_chunk",
    "tool_call",
    "tool_result",
    "turn",
    "turn_end",
    "turn_start",
    "turns",
    "user_message",
]

# The number of events :func:`turn` yields: a client can tell the next turn's number from ``eventCount``.
TURN_LENGTH = 9


def text_chunk(turn: int, step: int, text: str) -> Event:
    return {"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": {"type": "text", "text": text}}}


def note(text: str) -> Event:
    """A log-only event (a type the rules do not check): allowed anywhere, never in the history."""
    return {"type": "forklog-test/note", "data": {"text": text}}


def open_turn(turn: int) -> list[Event]:
    """The first events of a turn, left open inside step 1."""
    return [turn_start(turn), user_message(f"question {turn}"), step_start(turn), text_chunk(turn, 1, "thinking")]


def close_turn(turn: int, kind: str = "completed") -> list[Event]:
    """The rest of the turn :func:`open_turn` began: a tool round trip, the answer, step and turn end."""
    call_id = message_id(f"call-{turn}")
    return [
        tool_call(turn, 1, call_id),
        tool_result(turn, 1, call_id, f"result {turn}"),
        assistant_message(turn, 1, f"answer {turn}"),
        step_end(turn),
        turn_end(turn, kind),
    ]


def turn(number: int, kind: str = "completed") -> list[Event]:
    """One complete turn of :data:`TURN_LENGTH` events."""
    return open_turn(number) + close_turn(number, kind)


def turns(count: int, first: int = 1) -> list[Event]:
    return [event for number in range(first, first + count) for event in turn(number)]


def as_seed(events: list[Event], *, first_time: int = 1_700_000_000_000) -> list[Event]:
    """``events`` as a seed carrying ``seq`` and ``time``, the way a stored log does."""
    return [{**event, "seq": seq, "time": first_time + seq} for seq, event in enumerate(events)]


def nested_list(depth: int) -> Any:
    """A JSON value of ``depth`` nested arrays: ``[[[...]]]``."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value
