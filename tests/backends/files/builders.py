"""Valid events and turns for the persistence tests (appended events: no seq, no time)."""

from __future__ import annotations

from typing import Any

import orjson

from tests.events import (
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
    "assistant_message",
    "close_turn",
    "full_turn",
    "log_only",
    "open_turn",
    "step_end",
    "step_start",
    "text_chunk",
    "tool_call",
    "tool_result",
    "turn_end",
    "turn_start",
    "turns",
    "user_message",
]


def text_chunk(turn: int, step: int, text: str) -> dict[str, Any]:
    return {
        "type": "assistant/chunk",
        "data": {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": text}},
    }


def log_only(note: str) -> dict[str, Any]:
    """An event of a type the rules do not check; allowed anywhere."""
    return {"type": "forklog-test/note", "data": {"note": note}}


def open_turn(turn: int, text: str = "hello") -> list[dict[str, Any]]:
    """A turn's first events: the turn is left open, inside step 1."""
    return [
        turn_start(turn),
        user_message(f"{text} (turn {turn})"),
        step_start(turn, 1),
        text_chunk(turn, 1, "Thinking"),
        text_chunk(turn, 1, " about"),
        text_chunk(turn, 1, " it"),
    ]


def close_turn(turn: int, text: str = "done") -> list[dict[str, Any]]:
    """The rest of a turn :func:`open_turn` began: a tool round trip, the answer, step and turn end."""
    call_id = f"call-{message_id('c')}"
    return [
        tool_call(turn, 1, call_id),
        tool_result(turn, 1, call_id, "file contents"),
        assistant_message(turn, 1, f"{text} (turn {turn})"),
        step_end(turn, 1),
        turn_end(turn),
    ]


def full_turn(turn: int, text: str = "hello") -> list[dict[str, Any]]:
    return open_turn(turn, text) + close_turn(turn, text)


def turns(first: int, count: int) -> list[dict[str, Any]]:
    """``count`` complete turns numbered from ``first``."""
    events: list[dict[str, Any]] = []
    for turn in range(first, first + count):
        events += full_turn(turn)
    return events


def packed(data: bytes) -> bytes:
    """The file with its first three chunks in a row of packed chunks (a form forklog reads, never writes)."""
    lines = data.split(b"\n")
    chunks = [orjson.loads(line) for line in lines[4:7]]
    assert {chunk["type"] for chunk in chunks} == {"assistant/chunk"}
    row = {
        "type": "text-chunks",
        "seq0": chunks[0]["seq"],
        "time0": chunks[0]["time"],
        "data": {"turn": 1, "step": 1, "index": 0, "dt": [0, 0], "texts": [c["data"]["chunk"]["text"] for c in chunks]},
    }
    return b"\n".join([*lines[:4], orjson.dumps(row), *lines[7:]])
