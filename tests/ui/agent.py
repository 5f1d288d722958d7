"""Sessions that look like a coding agent's, for the session browser's tests: each turn is a question, a step in
which the model reasons and calls a tool, the tool's result, and a step with the answer."""

from __future__ import annotations

import json
from typing import Any

from tests.events import PROVIDER, Event, message_id, step_end, step_start, turn_end, turn_start, user_message

__all__ = [
    "AGENT_TURN_LENGTH",
    "agent_turn",
    "agent_turns",
    "close_agent_turn",
    "open_agent_turn",
    "tool_result_event",
]

AGENT_TURN_LENGTH = 11  # the events of one agent_turn


def _assistant(turn: int, step: int, content: list[dict[str, Any]]) -> Event:
    message = {"id": message_id("assistant"), "role": "assistant", "content": content, "source": PROVIDER}
    return {
        "type": "assistant/message",
        "data": {"turn": turn, "step": step, "message": message},
        "surfaceOp": "append",
    }


def tool_result_event(turn: int, step: int, call_id: str, output: str) -> Event:
    block = {"type": "tool-result", "toolCallId": call_id, "content": [{"type": "text", "text": output}]}
    message = {
        "id": message_id("tool"),
        "role": "user",
        "content": [block],
        "source": {"kind": "tool", "callId": call_id},
    }
    return {"type": "tool/result", "data": {"turn": turn, "step": step, "message": message}, "surfaceOp": "append"}


def open_agent_turn(turn: int, question: str, command: str) -> tuple[list[Event], str]:
    """The turn up to the model's tool call (the result not yet there), and the call's id."""
    call_id = f"call-{message_id(str(turn))}"
    arguments = json.dumps({"command": command})
    call: dict[str, Any] = {"type": "tool-call", "id": call_id, "name": "bash", "arguments": arguments}
    reasoning: dict[str, Any] = {
        "type": "reasoning",
        "text": f"To answer I should run `{command}` and read its output.",
    }
    events = [
        turn_start(turn),
        user_message(question),
        step_start(turn, 1),
        _assistant(turn, 1, [reasoning, call]),
        {
            "type": "tool/call",
            "data": {"turn": turn, "step": 1, "callId": call_id, "name": "bash", "arguments": arguments},
        },
    ]
    return events, call_id


def close_agent_turn(turn: int, call_id: str, output: str, answer: str, kind: str = "completed") -> list[Event]:
    """The rest of the turn :func:`open_agent_turn` began: the tool's result, the answer, and ``turn/end``."""
    return [
        tool_result_event(turn, 1, call_id, output),
        step_end(turn, 1),
        step_start(turn, 2),
        _assistant(turn, 2, [{"type": "text", "text": answer}]),
        step_end(turn, 2),
        turn_end(turn, kind),
    ]


def agent_turn(
    turn: int, question: str, command: str, output: str, answer: str, kind: str = "completed"
) -> list[Event]:
    """One whole turn of :data:`AGENT_TURN_LENGTH` events, ending with ``turn/end`` of reason ``kind``."""
    events, call_id = open_agent_turn(turn, question, command)
    return events + close_agent_turn(turn, call_id, output, answer, kind)


def agent_turns(count: int) -> list[Event]:
    """``count`` numbered turns (``question N``, ``echo N``...), all completed."""
    return [
        event
        for turn in range(1, count + 1)
        for event in agent_turn(turn, f"question {turn}", f"echo {turn}", str(turn), f"answer {turn}")
    ]
