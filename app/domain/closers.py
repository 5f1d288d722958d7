"""Closing an abandoned turn (spec 17): DSH's ``interruptedTurnClosers`` (``@deepseek-ai/dsh-session``'s repair).

DSH's loader closes a log's open tail turn with synthetic events: an error ``tool/result`` for each tool call the
model asked for (a ``tool-call`` block of an ``assistant/message``) that no result answered, in the order they were
asked, then the open step's ``step/end``, then ``turn/end`` with ``reason: {kind: "interrupted"}``. A call that a
``tool/call`` event recorded as started gets ``TOOL_OUTCOME_UNKNOWN`` (citing that event); one never started gets
``TOOL_NOT_STARTED``.

The calls DSH would answer are kept as the log grows (:func:`fold_unanswered`, a few entries while a step is open,
none after it), so the closers are a function of the log's state alone (:func:`interrupted_turn_closers`). Keys
compare as a JavaScript ``Map``'s do: a string equals the same string, a number the same number, and an object or
array only itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import count
from typing import Any

from app.domain.jsonvalue import UNDEFINED, is_number, js_str

__all__ = [
    "NO_UNANSWERED",
    "TOOL_NOT_STARTED",
    "TOOL_OUTCOME_UNKNOWN",
    "Unanswered",
    "fold_unanswered",
    "interrupted_turn_closers",
    "unanswered_columns",
    "unanswered_of_columns",
]

TOOL_NOT_STARTED = "TOOL_NOT_STARTED"
TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"

_NOT_STARTED_TEXT = (
    "The tool call was interrupted before the Harness recorded it as started. Retry it if it is still needed."
)
_UNKNOWN_TEXT = (
    "The tool call was interrupted after it was recorded, but no result was durably recorded. Its outcome is unknown. "
    "Decide whether to retry from the tool semantics: retry only if the operation is read-only or idempotent; if it "
    "may have side effects, first verify external state or ask the user. Do not retry blindly."
)

# One call DSH would answer: (its Map key, its callId as the message gave it, the step of that message, the seq of the
# tool/call that started it or None). A tuple of them, in the Map's order; changed only by making a new one.
Entry = tuple[Any, Any, Any, int | None]
Unanswered = tuple[Entry, ...]
NO_UNANSWERED: Unanswered = ()

_identities = count()


def _key(value: Any) -> Any:
    """``value``'s identity as a JavaScript Map key (SameValueZero): objects and arrays are each their own."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None or value is UNDEFINED:
        return ("constant", repr(value))
    if is_number(value):
        return ("number", float(value))
    return ("object", next(_identities))


def _set(calls: Unanswered, call_id: Any, step: Any) -> Unanswered:
    """``Map.set(callId, {step})``: a known key keeps its place, with the new value (a new start unrecorded)."""
    key = _key(call_id)
    for index, entry in enumerate(calls):
        if entry[0] == key:
            return (*calls[:index], (key, call_id, step, None), *calls[index + 1 :])
    return (*calls, (key, call_id, step, None))


def fold_unanswered(calls: Unanswered, event: dict[str, Any]) -> Unanswered:
    """The calls DSH would answer after ``event``, an admitted event (``calls`` itself when it changes nothing)."""
    kind = event["type"]
    if kind in ("turn/start", "turn/end", "step/end"):
        return NO_UNANSWERED
    if kind == "assistant/message":
        data = event["data"]
        for block in data["message"]["content"]:
            if isinstance(block, dict) and block.get("type") == "tool-call":
                calls = _set(calls, block.get("id", UNDEFINED), data.get("step", UNDEFINED))
        return calls
    if not calls:
        return calls
    if kind == "tool/call":
        key = _key(event["data"]["callId"])
        for index, entry in enumerate(calls):
            if entry[0] == key:
                return (*calls[:index], (key, entry[1], entry[2], event["seq"]), *calls[index + 1 :])
        return calls
    if kind == "tool/result":
        key = _key(event["data"]["message"]["source"]["callId"])
        kept = tuple(entry for entry in calls if entry[0] != key)
        return calls if len(kept) == len(calls) else kept
    return calls


def fold_unanswered_all(calls: Unanswered, events: Iterable[dict[str, Any]]) -> Unanswered:
    for event in events:
        calls = fold_unanswered(calls, event)
    return calls


def unanswered_columns(calls: Unanswered) -> list[Any]:
    """What a store keeps of them: ``[callId, step, callSeq]`` each, in order (an absent value as null)."""
    return [[None if value is UNDEFINED else value for value in entry[1:]] for entry in calls]


def unanswered_of_columns(columns: Sequence[Any]) -> Unanswered:
    """The calls whose :func:`unanswered_columns` these are (ValueError if they are not)."""
    calls: list[Entry] = []
    for call_id, step, call_seq in columns:
        if call_seq is not None and not isinstance(call_seq, int):
            raise ValueError("a stored call's seq is not a seq")
        calls.append((_key(call_id), call_id, step, call_seq))
    return tuple(calls)


def interrupted_turn_closers(open_turn: Any, open_step: Any, calls: Unanswered, next_seq: int) -> list[dict[str, Any]]:
    """The events that close the open turn ``open_turn`` (None: no turn is open, no events) of a log of ``next_seq``
    events whose open step is ``open_step`` (or None) and whose unanswered calls are ``calls``: each as an append
    sends it (``type``, ``data`` and, for a result, ``surfaceOp`` and ``sourceEventSeqs``), without ``seq`` and
    ``time``. ``next_seq`` is the seq the first will get (DSH's message ids name it)."""
    if open_turn is None:
        return []
    seq = next_seq
    closers: list[dict[str, Any]] = []
    for _, call_id, step, call_seq in calls:
        started = call_seq is not None
        source: dict[str, Any] = {"kind": "tool"}
        block: dict[str, Any] = {"type": "tool-result"}
        if call_id is not UNDEFINED:  # (JSON drops an undefined member, as DSH's writer does)
            source["callId"] = call_id
            block["toolCallId"] = call_id
        block["isError"] = True
        block["content"] = [{"type": "text", "text": _UNKNOWN_TEXT if started else _NOT_STARTED_TEXT}]
        message = {
            "id": f"interrupted-tool-result-{js_str(call_id)}-{seq}",
            "role": "user",
            "source": source,
            "content": [block],
        }
        data: dict[str, Any] = {"turn": open_turn}
        if step is not UNDEFINED:
            data["step"] = step
        data["message"] = message
        data["error"] = (
            {"name": "ToolOutcomeUnknownError", "code": TOOL_OUTCOME_UNKNOWN}
            if started
            else {"name": "ToolNotStartedError", "code": TOOL_NOT_STARTED}
        )
        closer: dict[str, Any] = {"type": "tool/result", "data": data, "surfaceOp": "append"}
        if started:
            closer["sourceEventSeqs"] = [call_seq]
        closers.append(closer)
        seq += 1
    if open_step is not None:
        closers.append({"type": "step/end", "data": {"turn": open_turn, "step": open_step}})
        seq += 1
    closers.append({"type": "turn/end", "data": {"turn": open_turn, "reason": {"kind": "interrupted"}}})
    return closers
