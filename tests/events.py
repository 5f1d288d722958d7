"""Valid appendable events (no ``seq``, no ``time``: the server assigns them), shared by the test suites."""

from __future__ import annotations

import itertools
from typing import Any

Event = dict[str, Any]

_ids = itertools.count(1)

PROVIDER = {"kind": "model", "provider": "deepseek", "model": "deepseek-chat"}


def message_id(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


def turn_start(turn: int) -> Event:
    return {"type": "turn/start", "data": {"turn": turn}}


def turn_end(turn: int, kind: str = "completed") -> Event:
    return {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": kind}}}


def step_start(turn: int, step: int = 1) -> Event:
    return {"type": "step/start", "data": {"turn": turn, "step": step}}


def step_end(turn: int, step: int = 1) -> Event:
    return {"type": "step/end", "data": {"turn": turn, "step": step}}


def user_message(text: str, *, surface_op: Any = "append", sources: list[int] | None = None) -> Event:
    event: Event = {
        "type": "user/message",
        "data": {
            "id": message_id("user"),
            "role": "user",
            "content": [{"type": "text", "text": text}],
            "source": {"kind": "user"},
        },
        "surfaceOp": surface_op,
    }
    if sources is not None:
        event["sourceEventSeqs"] = sources
    return event


def assistant_message(turn: int, step: int, text: str | None) -> Event:
    """The model's answer; ``text=None`` gives an empty ``content`` (a surface node with no message)."""
    content = [] if text is None else [{"type": "text", "text": text}]
    return {
        "type": "assistant/message",
        "data": {
            "turn": turn,
            "step": step,
            "message": {"id": message_id("assistant"), "role": "assistant", "content": content, "source": PROVIDER},
        },
        "surfaceOp": "append",
    }


def tool_call(turn: int, step: int, call_id: str) -> Event:
    return {
        "type": "tool/call",
        "data": {"turn": turn, "step": step, "callId": call_id, "name": "read_file", "arguments": '{"path": "a"}'},
    }


def tool_result(turn: int, step: int, call_id: str, text: str) -> Event:
    return {
        "type": "tool/result",
        "data": {
            "turn": turn,
            "step": step,
            "message": {
                "id": message_id("tool"),
                "role": "user",
                "content": [
                    {"type": "tool-result", "toolCallId": call_id, "content": [{"type": "text", "text": text}]}
                ],
                "source": {"kind": "tool", "callId": call_id},
            },
        },
        "surfaceOp": "append",
    }


def question_and_answer(question: str, answer: str, number: int = 1) -> list[Event]:
    """Turn ``number`` whole: the user's question, one step with the assistant's answer."""
    return [
        turn_start(number),
        user_message(question),
        step_start(number),
        assistant_message(number, 1, answer),
        step_end(number),
        turn_end(number),
    ]
