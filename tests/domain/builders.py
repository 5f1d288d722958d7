"""Small factories for valid DSH events and turns, and one-call helpers around the store (the service over an
in-memory backend, :class:`~tests.service.harness.StoreHarness`).

Every builder returns a fresh ``dict`` shaped as a client would send it: ``{type, data, ...}`` without ``seq`` or
``time`` (use :func:`numbered` to give a seed explicit ones).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from app.backends.catalog import LiveSession
from app.domain.errors import ErrorCode, ForklogError
from tests.service.harness import StoreHarness, TakenSnapshot, refused

PROVIDER = "deepseek"
MODEL = "deepseek-chat"
T0 = 1_785_331_618_309  # a realistic epoch-ms start for the fake clock

_ids = itertools.count(1)


def _next_id(prefix: str) -> str:
    return f"{prefix}-{next(_ids)}"


class Clock:
    """A fake millisecond clock the store reads; tests move it by hand."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_store(clock: Clock | None = None) -> StoreHarness:
    return StoreHarness(clock or Clock())


# -- events --------------------------------------------------------------------------------------------------------


def event(kind: str, data: Any, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "data": data, **extra}


def turn_start(turn: Any) -> dict[str, Any]:
    return event("turn/start", {"turn": turn})


def turn_end(turn: Any, kind: str = "completed", **reason: Any) -> dict[str, Any]:
    return event("turn/end", {"turn": turn, "reason": {"kind": kind, **reason}})


def step_start(turn: Any, step: Any) -> dict[str, Any]:
    return event("step/start", {"turn": turn, "step": step})


def step_end(turn: Any, step: Any) -> dict[str, Any]:
    return event("step/end", {"turn": turn, "step": step})


def user_data(text: str = "hello", *, message_id: str | None = None) -> dict[str, Any]:
    return {
        "id": message_id or _next_id("user"),
        "role": "user",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }


def user_message(text: str = "hello", *, surface_op: Any = "append", **extra: Any) -> dict[str, Any]:
    return event("user/message", user_data(text), surfaceOp=surface_op, **extra)


def assistant_data(
    text: str | None = "hi",
    *,
    calls: Sequence[str] = (),
    message_id: str | None = None,
) -> dict[str, Any]:
    content: list[dict[str, Any]] = [] if text is None else [{"type": "text", "text": text}]
    content += [{"type": "tool-call", "id": call_id, "name": "shell", "arguments": "{}"} for call_id in calls]
    return {
        "id": message_id or _next_id("assistant"),
        "role": "assistant",
        "content": content,
        "source": {"kind": "model", "provider": PROVIDER, "model": MODEL},
    }


def assistant_message(
    turn: Any,
    step: Any,
    text: str | None = "hi",
    *,
    calls: Sequence[str] = (),
    surface_op: Any = "append",
    data_extra: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    data = {"turn": turn, "step": step, "message": assistant_data(text, calls=calls), **(data_extra or {})}
    return event("assistant/message", data, surfaceOp=surface_op, **extra)


def assistant_chunk(turn: Any, step: Any, text: str = "h", index: int = 0) -> dict[str, Any]:
    return event(
        "assistant/chunk", {"turn": turn, "step": step, "chunk": {"type": "text-delta", "index": index, "text": text}}
    )


def tool_call(turn: Any, step: Any, call_id: str, name: str = "shell", arguments: str = "{}") -> dict[str, Any]:
    return event("tool/call", {"turn": turn, "step": step, "callId": call_id, "name": name, "arguments": arguments})


def tool_result_data(
    turn: Any,
    step: Any,
    call_id: str,
    text: str = "ok",
    *,
    is_error: bool | None = None,
    error_code: str | None = None,
    message_id: str | None = None,
) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool-result", "toolCallId": call_id, "content": [{"type": "text", "text": text}]}
    if is_error is not None:
        block["isError"] = is_error
    data: dict[str, Any] = {
        "turn": turn,
        "step": step,
        "message": {
            "id": message_id or _next_id("result"),
            "role": "user",
            "content": [block],
            "source": {"kind": "tool", "callId": call_id},
        },
    }
    if error_code is not None:
        data["error"] = {"name": "ToolError", "code": error_code}
    return data


def tool_result(
    turn: Any,
    step: Any,
    call_id: str,
    text: str = "ok",
    *,
    is_error: bool | None = None,
    error_code: str | None = None,
    surface_op: Any = "append",
    **extra: Any,
) -> dict[str, Any]:
    data = tool_result_data(turn, step, call_id, text, is_error=is_error, error_code=error_code)
    return event("tool/result", data, surfaceOp=surface_op, **extra)


def not_started_result(turn: Any, step: Any, call_id: str) -> dict[str, Any]:
    return tool_result(turn, step, call_id, "the call never started", is_error=True, error_code="TOOL_NOT_STARTED")


def request_header(provider: str = PROVIDER, model: str = MODEL, **header: Any) -> dict[str, Any]:
    config = {"provider": provider, "model": model, **header.pop("config", {})}
    return event("request/header", {"header": {"config": config, **header}, "reason": "initial"})


def title(text: str = "A title") -> dict[str, Any]:
    """A plugin log-only event (DSH's session/title), allowed anywhere."""
    return event("session/title", {"title": text, "messageSeqs": [], "source": {"kind": "user"}})


def replace(start: int, end: int) -> dict[str, Any]:
    return {"op": "replace", "start": start, "end": end}


# -- turns ---------------------------------------------------------------------------------------------------------


def simple_turn(turn: int, text: str = "hello", *, reason: str = "completed") -> list[dict[str, Any]]:
    """turn/start, one step with a user message and an answer, turn/end."""
    return [
        turn_start(turn),
        step_start(turn, 1),
        user_message(text),
        assistant_chunk(turn, 1, "an"),
        assistant_chunk(turn, 1, "swer"),
        assistant_message(turn, 1, f"answer to {text}"),
        step_end(turn, 1),
        turn_end(turn, reason),
    ]


def tool_turn(turn: int, call_ids: Sequence[str] = ("call-1",)) -> list[dict[str, Any]]:
    """A two-step turn: the model calls tools in step 1 (each answered), then answers in step 2."""
    return [
        turn_start(turn),
        step_start(turn, 1),
        user_message(f"turn {turn}: use tools"),
        assistant_message(turn, 1, None, calls=call_ids),
        *itertools.chain.from_iterable(
            (tool_call(turn, 1, call_id), tool_result(turn, 1, call_id, f"output of {call_id}")) for call_id in call_ids
        ),
        step_end(turn, 1),
        step_start(turn, 2),
        assistant_message(turn, 2, "done"),
        step_end(turn, 2),
        turn_end(turn),
    ]


def turns(count: int, *, first: int = 1) -> list[dict[str, Any]]:
    """``count`` completed turns, alternating simple and tool turns."""
    out: list[dict[str, Any]] = []
    for turn in range(first, first + count):
        out += simple_turn(turn) if turn % 2 else tool_turn(turn, (f"call-{turn}-a", f"call-{turn}-b"))
    return out


def numbered(events: Iterable[dict[str, Any]], *, start_time: int = T0, start_seq: int = 0) -> list[dict[str, Any]]:
    """The events with explicit ``seq`` and ``time``, as a seed read from a DSH log carries them."""
    return [{**item, "seq": start_seq + i, "time": start_time + i} for i, item in enumerate(events)]


# -- store helpers -------------------------------------------------------------------------------------------------


def create(
    store: StoreHarness,
    session_id: str | None = None,
    seed: Sequence[Any] | None = None,
    meta: dict[str, Any] | None = None,
    **kwargs: Any,
) -> LiveSession:
    return store.create(session_id, seed, meta, **kwargs)


def append(store: StoreHarness, session_id: str, events: Sequence[Any], **kwargs: Any) -> list[dict[str, Any]]:
    return store.append(session_id, events, **kwargs)


def fork(store: StoreHarness, session_id: str, **kwargs: Any) -> LiveSession:
    return store.fork(session_id, **kwargs)


def snapshot(store: StoreHarness, session_id: str, **kwargs: Any) -> TakenSnapshot:
    return store.snapshot(session_id, **kwargs)


def events_of(store: StoreHarness, session_id: str) -> list[dict[str, Any]]:
    return store.get(session_id).log.events()


def history_of(store: StoreHarness, session_id: str, at_seq: int | None = None) -> list[Any]:
    return store.history(session_id, at_seq)[0]


def seed_refused(events: Sequence[Any], **kwargs: Any) -> ForklogError:
    """Create a session from ``events`` as a seed; it must be refused with INVALID_SEED."""
    store = make_store()
    error = refused(ErrorCode.INVALID_SEED, store.create, "s", events, **kwargs)
    assert "s" not in store
    return error


def append_refused(prefix: Sequence[Any], events: Sequence[Any], **kwargs: Any) -> ForklogError:
    """Append ``prefix`` (must pass) and then ``events`` (must be refused with INVALID_EVENT, storing nothing)."""
    store = make_store()
    create(store, "s")
    if prefix:
        append(store, "s", prefix)
    before = store.get("s").log.lines()
    error = refused(ErrorCode.INVALID_EVENT, store.append, "s", events, **kwargs)
    assert store.get("s").log.lines() == before
    return error
