"""Realistic streamed agent sessions, as a client appends them: the workload of the bytes-at-rest rows (spec 16).

A turn is a user message, then 2 to 4 model steps; each step streams its reasoning and then its text as deltas of
1 to 6 characters (one ``assistant/chunk`` event each), then the assistant message holding the whole reasoning and
text; every step but the last calls a tool whose result is a few KB of command output. The texts are drawn from a
fixed vocabulary by a seeded generator, so every run appends the same bytes. On average an event is about 150 bytes
of raw JSONL.

Two ways of appending (what spec 16's bars are about): :func:`steps` yields one batch a model step (and one for
the user message and the turn's start, one for its end), :func:`events` one batch an event. Both yield the events
without ``seq`` and ``time`` (the server sets them), ready for ``POST /sessions/{id}/events``.

Used by bench/bytes_at_rest.py (the files backend) and the PostgreSQL rows that share this workload.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

__all__ = ["TURNS", "events", "steps", "turn_batches"]

TURNS = 12  # a session's turns, by default

_SENTENCE = (
    "the agent reads the file and plans its next tool call so that every change is checked before it is written "
    "to the workspace then it runs the tests again looks at the failure and edits the function that parses "
    "the config while keeping the old behaviour for callers who still pass a path instead of a mapping"
)
_WORDS = _SENTENCE.split()
_PROVIDER = {"kind": "model", "provider": "deepseek", "model": "deepseek-v4-flash"}
_HEADER = {"header": {"config": {"provider": "deepseek", "model": "deepseek-v4-flash"}}, "reason": "initial"}


def _prose(rng: random.Random, length: int) -> str:
    words: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length]


def _deltas(rng: random.Random, text: str) -> list[str]:
    """``text`` cut into deltas of 1 to 6 characters, as a model streams it."""
    cut: list[str] = []
    position = 0
    while position < len(text):
        size = rng.randint(1, 6)
        cut.append(text[position : position + size])
        position += size
    return cut


def _tool_output(rng: random.Random, turn: int, step: int) -> str:
    """A few KB of what a command prints: file listings and test output."""
    lines = []
    for row in range(rng.randint(30, 70)):
        name = f"src/module_{turn}_{step}_{row}.py"
        lines.append(f"-rw-r--r-- 1 agent agent {rng.randint(200, 90000):6d} Dec  8 00:{row % 60:02d} {name}")
        if row % 9 == 0:
            lines.append(f"tests/test_{rng.choice(_WORDS)}.py::test_{rng.choice(_WORDS)} PASSED")
    return "\n".join(lines)


def turn_batches(turn: int, rng: random.Random) -> Iterator[list[dict[str, Any]]]:
    """One turn's events, a batch a model step (the user message with the turn's start first, its end last)."""
    user = {
        "id": f"u-{turn}",
        "role": "user",
        "content": [{"type": "text", "text": _prose(rng, rng.randint(80, 400))}],
        "source": {"kind": "user"},
    }
    yield [
        {"type": "user/message", "data": user, "surfaceOp": "append"},
        {"type": "turn/start", "data": {"turn": turn}},
    ]
    step_count = rng.randint(2, 4)
    for step in range(1, step_count + 1):
        batch: list[dict[str, Any]] = []
        if step == 1:
            batch.append({"type": "request/header", "data": _HEADER})
        batch.append({"type": "step/start", "data": {"turn": turn, "step": step}})
        reasoning = _prose(rng, rng.randint(150, 700))
        text = _prose(rng, rng.randint(60, 400))
        for index, (kind, whole) in enumerate((("reasoning-delta", reasoning), ("text-delta", text))):
            for delta in _deltas(rng, whole):
                chunk = {"type": kind, "index": index, "text": delta}
                batch.append({"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": chunk}})
        content: list[dict[str, Any]] = [{"type": "reasoning", "text": reasoning}, {"type": "text", "text": text}]
        call_id = f"call-{turn}-{step}"
        calls = step < step_count
        arguments = f'{{"command":"ls -la src && pytest -q tests/test_{step}.py"}}'
        if calls:
            content.append({"type": "tool-call", "id": call_id, "name": "bash", "arguments": arguments})
        message = {"id": f"a-{turn}-{step}", "role": "assistant", "content": content, "source": _PROVIDER}
        usage = {"inputTokens": 1200 + 40 * turn, "outputTokens": 300 + step, "cacheReadTokens": 1024}
        batch.append(
            {
                "type": "assistant/message",
                "data": {"turn": turn, "step": step, "message": message, "usage": usage},
                "surfaceOp": "append",
                "sourceEventSeqs": [],
            }
        )
        if calls:
            batch.append(
                {
                    "type": "tool/call",
                    "data": {"turn": turn, "step": step, "callId": call_id, "name": "bash", "arguments": arguments},
                }
            )
            result = {
                "id": f"r-{turn}-{step}",
                "role": "user",
                "content": [
                    {
                        "type": "tool-result",
                        "toolCallId": call_id,
                        "content": [{"type": "text", "text": _tool_output(rng, turn, step)}],
                    }
                ],
                "source": {"kind": "tool", "callId": call_id},
            }
            batch.append(
                {"type": "tool/result", "data": {"turn": turn, "step": step, "message": result}, "surfaceOp": "append"}
            )
        batch.append({"type": "step/end", "data": {"turn": turn, "step": step}})
        yield batch
    yield [{"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}}]


def steps(turns: int = TURNS, seed: int = 0) -> Iterator[list[dict[str, Any]]]:
    """A session's events, one batch a model step (see :func:`turn_batches`)."""
    rng = random.Random(seed)
    for turn in range(1, turns + 1):
        yield from turn_batches(turn, rng)


def events(turns: int = TURNS, seed: int = 0) -> Iterator[list[dict[str, Any]]]:
    """The same events as :func:`steps`, one batch an event."""
    for batch in steps(turns, seed):
        for event in batch:
            yield [event]
