"""Realistic streamed sessions, as a client appends them: reasoning and text deltas of 1-6 characters, tool results
of a few KB (about 154 bytes an event as raw JSONL, the workload of issue 39's measurements).

A turn is a ``user/message``, ``turn/start``, then three model steps (a ``request/header``, ``step/start``, ~90
``reasoning-delta`` and ~60 ``text-delta`` chunks, the assembled ``assistant/message`` citing every chunk in
``sourceEventSeqs``, in the first two steps a ``tool/call`` and its ``tool/result`` of 1.5-3 KB, ``step/end``), then
``turn/end``. The texts are drawn from a fixed vocabulary by a seeded generator, so a run is repeatable.

:func:`turn_steps` yields a turn's events as the appends of one step each (the first holds the turn's opening
events); flattening them gives the one-event appends. The events carry no ``seq`` nor ``time`` (the server assigns
them); ``base`` is the session's count before the turn, which the messages' ``sourceEventSeqs`` need.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

__all__ = ["turn_steps"]

_WORDS = [
    *("the", "agent", "reads", "the", "file", "then", "plans", "its", "next", "tool", "call", "so", "that", "each"),
    *("step", "is", "checked", "before", "it", "writes", "anything", "to", "the", "workspace;", "tests", "pass"),
    *("when", "the", "build", "is", "green", "and", "the", "diff", "is", "small", "enough", "to", "review", "by"),
    "hand",
]
_PROVIDER = {"kind": "model", "provider": "deepseek", "model": "deepseek-v4-flash"}
_HEADER = {"header": {"config": {"provider": "deepseek", "model": "deepseek-v4-flash"}}, "reason": "initial"}
STEPS = 3
REASONING_CHUNKS = 90
TEXT_CHUNKS = 60


def _prose(rng: random.Random, length: int) -> str:
    words: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length]


def _deltas(rng: random.Random, count: int) -> list[str]:
    """``count`` pieces of prose of 1-6 characters each, as a model streams them."""
    text = _prose(rng, count * 6)
    pieces: list[str] = []
    at = 0
    for _ in range(count):
        size = rng.randint(1, 6)
        pieces.append(text[at : at + size] or ".")
        at += size
    return pieces


def turn_steps(turn: int, base: int, rng: random.Random) -> Iterator[list[dict[str, Any]]]:
    """The events of turn ``turn`` of a session holding ``base`` events before it, one list a step."""
    seq = base
    opening: list[dict[str, Any]] = [
        {
            "type": "user/message",
            "data": {
                "id": f"u-{turn}",
                "role": "user",
                "content": [{"type": "text", "text": _prose(rng, 160)}],
                "source": {"kind": "user"},
            },
            "surfaceOp": "append",
        },
        {"type": "turn/start", "data": {"turn": turn}},
    ]
    seq += len(opening)
    for step in range(1, STEPS + 1):
        events = [
            *opening,
            {"type": "request/header", "data": _HEADER},
            {"type": "step/start", "data": {"turn": turn, "step": step}},
        ]
        opening = []
        seq += 2
        first_chunk = seq
        reasoning = _deltas(rng, REASONING_CHUNKS + rng.randint(-10, 10))
        text = _deltas(rng, TEXT_CHUNKS + rng.randint(-10, 10))
        for kind, pieces in (("reasoning-delta", reasoning), ("text-delta", text)):
            for piece in pieces:
                chunk = {"type": kind, "index": 0, "text": piece}
                events.append({"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": chunk}})
        seq += len(reasoning) + len(text)
        content: list[dict[str, Any]] = [
            {"type": "reasoning", "text": "".join(reasoning)},
            {"type": "text", "text": "".join(text)},
        ]
        call_id = f"call-{turn}-{step}"
        calls = step < STEPS
        arguments = '{"command":"cat src/app/module_' + str(step) + '.py","description":"read the module"}'
        if calls:
            content.append({"type": "tool-call", "id": call_id, "name": "bash", "arguments": arguments})
        message = {"id": f"a-{turn}-{step}", "role": "assistant", "content": content, "source": _PROVIDER}
        usage = {"inputTokens": 1200 + turn, "outputTokens": 300, "cacheReadTokens": 1024}
        events.append(
            {
                "type": "assistant/message",
                "data": {"turn": turn, "step": step, "message": message, "usage": usage},
                "surfaceOp": "append",
                "sourceEventSeqs": list(range(first_chunk, seq)),
            }
        )
        seq += 1
        if calls:
            call = {"turn": turn, "step": step, "callId": call_id, "name": "bash", "arguments": arguments}
            events.append({"type": "tool/call", "data": call})
            result = {
                "id": f"r-{turn}-{step}",
                "role": "user",
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": call_id,
                        "content": [{"type": "text", "text": _prose(rng, rng.randint(1500, 3000))}],
                        "isError": False,
                    }
                ],
                "source": {"kind": "tool", "callId": call_id},
            }
            events.append(
                {
                    "type": "tool/result",
                    "data": {"turn": turn, "step": step, "message": result},
                    "surfaceOp": "append",
                    "sourceEventSeqs": [seq],
                }
            )
            seq += 2
        events.append({"type": "step/end", "data": {"turn": turn, "step": step}})
        seq += 1
        if step == STEPS:
            events.append({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}})
            seq += 1
        yield events
