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


def delta(turn: int, step: int, text: str, kind: str = "text-delta") -> Event:
    """A streamed chunk of the model's output (``text-delta`` or ``reasoning-delta``; an empty text is no token)."""
    return {
        "type": "assistant/chunk",
        "data": {"turn": turn, "step": step, "chunk": {"type": kind, "index": 0, "text": text}},
    }


def usage_chunk(turn: int, step: int, **tokens: int) -> Event:
    """The provider's token counts for the step's model call."""
    return {
        "type": "assistant/chunk",
        "data": {"turn": turn, "step": step, "chunk": {"type": "usage", "usage": tokens}},
    }


def assistant_calls(turn: int, step: int, call_ids: list[str], output_tokens: int | None = None) -> Event:
    """The model's message asking for ``call_ids`` (its ``tool-call`` blocks), with its usage when given."""
    content = [{"type": "tool-call", "id": call_id, "name": "read_file", "arguments": "{}"} for call_id in call_ids]
    event = assistant_message(turn, step, None)
    event["data"]["message"]["content"] = content
    if output_tokens is not None:
        event["data"]["usage"] = {"inputTokens": 10, "outputTokens": output_tokens}
    return event


def agent_step(turn: int, step: int, *, calls: int, answered: int | None = None, tokens: int = 7) -> list[Event]:
    """One model step as an agent streams it: reasoning and text deltas (an empty one first), a usage chunk, the
    message asking for ``calls`` tools, each started, the first ``answered`` (default all) answered; step open."""
    call_ids = [message_id(f"call-{turn}-{step}") for _ in range(calls)]
    events = [
        step_start(turn, step),
        delta(turn, step, "", "reasoning-delta"),
        delta(turn, step, "let me see", "reasoning-delta"),
        delta(turn, step, "Looking"),
        usage_chunk(turn, step, inputTokens=100 * step, outputTokens=tokens, cacheReadTokens=3, reasoningTokens=2),
        assistant_calls(turn, step, call_ids, output_tokens=tokens),
    ]
    for call_id in call_ids:
        events.append(tool_call(turn, step, call_id))
    for call_id in call_ids[: calls if answered is None else answered]:
        events.append(tool_result(turn, step, call_id, "done"))
    return events


def agent_turn(turn: int, steps: int = 2) -> list[Event]:
    """A whole agent turn: the user's question, ``steps`` steps with tool calls, then the final answer."""
    events = [turn_start(turn), user_message(f"task {turn}")]
    for step in range(1, steps + 1):
        events += [*agent_step(turn, step, calls=step % 3), step_end(turn, step)]
    events += [step_start(turn, steps + 1), delta(turn, steps + 1, "Done"), assistant_message(turn, steps + 1, "Done")]
    return [*events, step_end(turn, steps + 1), turn_end(turn)]
