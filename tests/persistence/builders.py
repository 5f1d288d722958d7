"""Valid events and turns for the persistence tests (appended events: no seq, no time)."""

from __future__ import annotations

import itertools
from typing import Any

_message_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}-{next(_message_ids)}"


def turn_start(turn: int) -> dict[str, Any]:
    return {"type": "turn/start", "data": {"turn": turn}}


def turn_end(turn: int, kind: str = "completed") -> dict[str, Any]:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": kind}}}


def step_start(turn: int, step: int = 1) -> dict[str, Any]:
    return {"type": "step/start", "data": {"turn": turn, "step": step}}


def step_end(turn: int, step: int = 1) -> dict[str, Any]:
    return {"type": "step/end", "data": {"turn": turn, "step": step}}


def user_message(text: str) -> dict[str, Any]:
    return {
        "type": "user/message",
        "data": {
            "id": _next_id("user"),
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "source": {"kind": "user"},
        },
        "surfaceOp": "append",
    }


def text_chunk(turn: int, step: int, text: str) -> dict[str, Any]:
    return {
        "type": "assistant/chunk",
        "data": {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": 0, "text": text}},
    }


def assistant_message(turn: int, step: int, text: str) -> dict[str, Any]:
    return {
        "type": "assistant/message",
        "data": {
            "turn": turn,
            "step": step,
            "message": {
                "id": _next_id("assistant"),
                "role": "assistant",
                "content": [{"type": "text", "text": text}],
                "source": {"kind": "model", "provider": "deepseek", "model": "deepseek-chat"},
            },
        },
        "surfaceOp": "append",
    }


def tool_call(turn: int, step: int, call_id: str) -> dict[str, Any]:
    return {
        "type": "tool/call",
        "data": {"turn": turn, "step": step, "callId": call_id, "name": "read_file", "arguments": '{"path": "a"}'},
    }


def tool_result(turn: int, step: int, call_id: str, text: str) -> dict[str, Any]:
    return {
        "type": "tool/result",
        "data": {
            "turn": turn,
            "step": step,
            "message": {
                "id": _next_id("tool"),
                "role": "user",
                "content": [
                    {"type": "tool-result", "toolCallId": call_id, "content": [{"type": "text", "text": text}]}
                ],
                "source": {"kind": "tool", "callId": call_id},
            },
        },
        "surfaceOp": "append",
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
    call_id = f"call-{_next_id('c')}"
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
