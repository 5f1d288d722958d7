"""Valid events and turns for the HTTP tests.

Appended events carry no ``seq``/``time`` (the server assigns them); :func:`as_seed` numbers a list for a seed.
"""

from __future__ import annotations

import itertools
from typing import Any

Event = dict[str, Any]

_ids = itertools.count(1)

# The number of events :func:`turn` yields: a client can tell the next turn's number from ``eventCount``.
TURN_LENGTH = 9


def _message_id(prefix: str) -> str:
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
            "id": _message_id("user"),
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
            "message": {
                "id": _message_id("assistant"),
                "role": "assistant",
                "content": content,
                "source": {"kind": "model", "provider": "deepseek", "model": "deepseek-chat"},
            },
        },
        "surfaceOp": "append",
    }


def text_chunk(turn: int, step: int, text: str) -> Event:
    return {"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": {"type": "text", "text": text}}}


def tool_call(turn: int, step: int, call_id: str) -> Event:
    return {
        "type": "tool/call",
        "data": {"turn": turn, "step": step, "callId": call_id, "name": "read_file", "arguments": '{"path":"a"}'},
    }


def tool_result(turn: int, step: int, call_id: str, text: str) -> Event:
    return {
        "type": "tool/result",
        "data": {
            "turn": turn,
            "step": step,
            "message": {
                "id": _message_id("tool"),
                "role": "user",
                "content": [
                    {"type": "tool-result", "toolCallId": call_id, "content": [{"type": "text", "text": text}]}
                ],
                "source": {"kind": "tool", "callId": call_id},
            },
        },
        "surfaceOp": "append",
    }


def note(text: str) -> Event:
    """A log-only event (a type the rules do not check): allowed anywhere, never in the history."""
    return {"type": "forklog-test/note", "data": {"text": text}}


def open_turn(turn: int) -> list[Event]:
    """The first events of a turn, left open inside step 1."""
    return [turn_start(turn), user_message(f"question {turn}"), step_start(turn), text_chunk(turn, 1, "thinking")]


def close_turn(turn: int, kind: str = "completed") -> list[Event]:
    """The rest of the turn :func:`open_turn` began: a tool round trip, the answer, step and turn end."""
    call_id = f"call-{turn}-{next(_ids)}"
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
