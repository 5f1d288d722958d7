"""Realistic DSH sessions, written straight to JSONL files the server recovers at start.

A turn is what an agent really logs: a user message, then two model steps (a request header, ~100 streamed
``assistant/chunk`` events of ~150 bytes, the assistant message, a tool call and its result in the first step),
then ``turn/end``. A session of ``n`` events holds ``n // 213`` such turns (at least one); the chunk counts are
spread so that the log has exactly ``n`` events and ends at a ``turn/end`` (so it is forkable).

Each line is written as forklog itself would store it (``orjson.dumps`` of the event, keys in its order), after
a header line with the fields forklog writes, so that recovery reads the file as one of its own.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from app.domain.dsh_frames import COMPACT_LEVEL, encode_log

EVENTS_PER_TURN = 213  # with the default 100 chunks per step
FIXED_PER_TURN = 13  # every event of a turn but its chunks
_WORDS = [
    *("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "the", "agent", "reads"),
    *("files", "and", "plans", "its", "next", "tool", "call", "carefully", "so", "that", "every", "step", "is"),
    *("checked", "twice", "before", "anything", "is", "written", "to", "the", "workspace"),
]
_PROVIDER = {"kind": "model", "provider": "deepseek", "model": "deepseek-v4-flash"}
_HEADER_DATA = {"header": {"config": {"provider": "deepseek", "model": "deepseek-v4-flash"}}, "reason": "initial"}


def _text(seed: int, length: int) -> str:
    out: list[str] = []
    size = 0
    i = seed
    while size < length:
        word = _WORDS[i % len(_WORDS)]
        out.append(word)
        size += len(word) + 1
        i += 7
    return " ".join(out)[:length]


_CHUNK_TEXTS = [_text(i, 40) for i in range(64)]


def _chunk_counts(n_events: int, turns: int | None = None) -> tuple[int, list[int]]:
    turns = turns if turns is not None else max(1, n_events // EVENTS_PER_TURN)
    budget = n_events - FIXED_PER_TURN * turns
    if budget < 2 * turns:
        raise ValueError(f"{n_events} events are too few for realistic turns")
    steps = 2 * turns
    base, extra = divmod(budget, steps)
    return turns, [base + (1 if i < extra else 0) for i in range(steps)]


def iter_events(
    n_events: int, *, start_time: int = 1_785_331_618_309, turns: int | None = None
) -> Iterator[dict[str, Any]]:
    """``n_events`` events of complete turns (``turns`` of them, by default one per ~213 events), with ``seq`` and
    ``time``, in forklog's key order."""
    turns, chunks = _chunk_counts(n_events, turns)
    seq = 0
    clock = start_time

    def event(kind: str, data: Any, **extra: Any) -> dict[str, Any]:
        nonlocal seq, clock
        record: dict[str, Any] = {"type": kind, "seq": seq, "time": clock, "data": data}
        record.update(extra)
        seq += 1
        clock += 3
        return record

    for t in range(1, turns + 1):
        yield event(
            "user/message",
            {
                "id": f"u-{t}",
                "role": "user",
                "content": [{"type": "text", "text": _text(t, 200)}],
                "source": {"kind": "user"},
            },
            surfaceOp="append",
        )
        yield event("turn/start", {"turn": t})
        for step in (1, 2):
            yield event("request/header", _HEADER_DATA)
            yield event("step/start", {"turn": t, "step": step})
            first_chunk = seq
            count = chunks[2 * (t - 1) + step - 1]
            for k in range(count):
                chunk = {"type": "text-delta", "index": 0, "text": _CHUNK_TEXTS[(t + k) % len(_CHUNK_TEXTS)]}
                yield event("assistant/chunk", {"turn": t, "step": step, "chunk": chunk})
            content: list[dict[str, Any]] = [{"type": "text", "text": _text(t + step, 300)}]
            call_id = f"call-{t}-{step}"
            if step == 1:
                arguments = orjson.dumps({"command": f"ls -la /work/src/{t}", "description": "list files"}).decode()
                content.append({"type": "tool-call", "id": call_id, "name": "bash", "arguments": arguments})
            message = {"id": f"a-{t}-{step}", "role": "assistant", "content": content, "source": _PROVIDER}
            usage = {"inputTokens": 1200 + t, "outputTokens": 300, "cacheReadTokens": 1024}
            yield event(
                "assistant/message",
                {"turn": t, "step": step, "message": message, "usage": usage},
                surfaceOp="append",
                sourceEventSeqs=list(range(first_chunk, first_chunk + count)),
            )
            if step == 1:
                call_seq = seq
                yield event(
                    "tool/call", {"turn": t, "step": step, "callId": call_id, "name": "bash", "arguments": arguments}
                )
                result = {
                    "id": f"r-{t}",
                    "role": "user",
                    "content": [
                        {
                            "type": "tool-result",
                            "toolCallId": call_id,
                            "content": [{"type": "text", "text": _text(t * 3, 400)}],
                            "isError": False,
                        }
                    ],
                    "source": {"kind": "tool", "callId": call_id},
                }
                yield event(
                    "tool/result",
                    {"turn": t, "step": step, "message": result},
                    surfaceOp="append",
                    sourceEventSeqs=[call_seq],
                )
            yield event("step/end", {"turn": t, "step": step})
        yield event("turn/end", {"turn": t, "reason": {"kind": "completed"}})


def appended_turns(n_events: int, turns: int) -> Iterator[list[dict[str, Any]]]:
    """The events of ``iter_events(n_events, turns=turns)`` a turn at a time, as a client appends them (no seq, no
    time)."""
    turn: list[dict[str, Any]] = []
    for event in iter_events(n_events, turns=turns):
        turn.append({key: value for key, value in event.items() if key not in ("seq", "time")})
        if event["type"] == "turn/end":
            yield turn
            turn = []


def header_line(session_id: str, created_at: int) -> bytes:
    record = {
        "type": "session",
        "version": 0,
        "id": session_id,
        "createdAt": created_at,
        "delegationDepth": 0,
        "instance": uuid.uuid4().hex,
    }
    return orjson.dumps(record) + b"\n"


def event_lines(n_events: int) -> bytes:
    """The JSONL body (no header) of a session of ``n_events`` events."""
    return b"".join(orjson.dumps(e) + b"\n" for e in iter_events(n_events))


def write_session(
    sessions_dir: Path, session_id: str, n_events: int, *, created_at: int, body: bytes = b"", compression: str = "none"
) -> int:
    """Write ``<sessions_dir>/<id>.jsonl`` (``.jsonl.zstd``: DSH's frames, as forklog's compaction leaves them, with
    ``compression="zstd"``: see :func:`record_compression`); return its size in bytes. ``body`` reuses lines made
    earlier."""
    sessions_dir.mkdir(parents=True, exist_ok=True)
    lines = body or event_lines(n_events)
    if compression == "zstd":
        path = sessions_dir / f"{session_id}.jsonl.zstd"
        path.write_bytes(encode_log(header_line(session_id, created_at), lines, COMPACT_LEVEL))
        return os.path.getsize(path)
    path = sessions_dir / f"{session_id}.jsonl"
    with open(path, "wb") as handle:
        handle.write(header_line(session_id, created_at))
        handle.write(lines)
    return os.path.getsize(path)


def record_compression(data_dir: Path, compression: str) -> None:
    """Record the data directory's encoding as forklog does (a directory without the record is ``none``)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "format.json").write_bytes(orjson.dumps({"compression": compression}) + b"\n")
