"""The rules every event obeys on its way into a session log (spec section 1).

One function, :func:`admit`, checks one candidate against the log's running
:class:`~app.domain.log_state.LogState` and returns the event as it will be stored; the shapes of events are
:mod:`app.domain.event_shapes`'. The relational rules are a faithful port of DSH's invariant companion, including
its JavaScript ``===`` comparisons, so that a seed DSH accepts is accepted here and one it refuses is refused;
forklog's own stricter rules (spec 1.4, "Parity with DSH") are added on top.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.domain.errors import EventRejected
from app.domain.event_shapes import (
    CHECKED_TYPES,
    EMPTY_SOURCES_TYPES,
    SURFACE_TYPES,
    Rejected,
    check_shapes,
    check_type,
    known_type,
)
from app.domain.jsonvalue import (
    MAX_SAFE_INTEGER,
    UNDEFINED,
    JsTypeError,
    is_event_seq,
    is_safe_integer,
    js_get,
    js_str,
    json_equal,
    strict_equal,
)
from app.domain.log_state import NO_PENDING, LogState

__all__ = ["ENVELOPE_KEYS", "EventLookup", "admit", "admit_stored", "admit_stored_chunks"]

ENVELOPE_KEYS = frozenset({"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"})
TOOL_NOT_STARTED = "TOOL_NOT_STARTED"
CHUNK_TYPE = "assistant/chunk"

_TURN_ENCLOSED = frozenset({"todo/write", "request/header", "request/context"})
_STEP_SCOPED = frozenset({"step/end", "assistant/chunk", "assistant/message", "tool/call"})
_ONLY_INTEGERS = frozenset({int})  # (the type of every plain seq: a bool's is bool)

EventLookup = Callable[[int], dict[str, Any]]


def admit(
    state: LogState,
    raw: Any,
    index: int,
    *,
    appended: bool,
    now: int,
    event_at: EventLookup,
    lossless_break: str | None = None,
) -> dict[str, Any]:
    """Check ``raw`` as the next event of the log behind ``state``; update ``state`` and return the stored event.

    ``appended`` events must not carry ``seq``/``time``; seed and recovered events may (and then ``seq`` must be
    the index). ``event_at(seq)`` returns an earlier stored event (a tool/result replace compares with it).
    Raises :class:`EventRejected` naming ``index`` and a reason a person can act on.
    """
    try:
        if lossless_break is not None:
            raise Rejected(f"the event cannot be stored losslessly: {lossless_break}")
        event = _envelope(state, raw, appended=appended, now=now)
        check_shapes(event)
        op = _surface(state, event, event_at)
        _relations(state, event, op)
    except Rejected as rejected:
        raise EventRejected(index, str(rejected)) from None
    except JsTypeError as exc:  # DSH itself would throw reading a key of null
        raise EventRejected(index, f"{js_str(raw.get('type') if isinstance(raw, dict) else raw)}: {exc}") from None
    state.count += 1
    state.last_time = event["time"]
    state.last_type = known_type(event["type"])
    if event["type"] == "turn/end":
        state.last_turn_end_seq = event["seq"]
    return event


def admit_stored(state: LogState, raw: Any) -> bool:
    """Admit ``raw``, a stored event, at once when it has one of the common shapes whose checks are a handful of
    comparisons: exactly ``type``, ``seq``, ``time`` and ``data`` (integers where numbers are), of type
    ``step/start``, ``step/end``, ``turn/start`` or ``turn/end``, that the rules let through. Then ``state`` changes
    exactly as :func:`admit` would change it (which would return ``raw`` itself) and True; else nothing changes and
    False: :func:`admit` decides (and says why it refuses). Streamed chunks, the same shape, are
    :func:`admit_stored_chunks`'s, a run at a time.

    A start checks every stored event; most of a log is these few shapes (streamed chunks above all), and the
    general checks cost several times the parsing of the line.
    """
    if type(raw) is not dict or len(raw) != 4:
        return False
    try:  # (subscripts: a start runs this for most events of a log, and a method call costs more)
        seq = raw["seq"]
        time = raw["time"]
        data = raw["data"]
        kind = CHECKED_TYPES[raw["type"]]  # a type already found well-formed
    except (KeyError, TypeError):  # a member missing, or a type that is no string
        return False
    if (
        type(seq) is not int
        or seq != state.count
        or type(time) is not int
        or not -MAX_SAFE_INTEGER <= time <= MAX_SAFE_INTEGER
        or type(data) is not dict
    ):
        return False
    try:
        turn = data["turn"]
        if kind == "step/end":
            step = data["step"]
            if type(turn) is not int or turn != state.open_turn or type(state.open_turn) is not int:
                return False
            if type(step) is not int or step != state.open_step or type(state.open_step) is not int:
                return False
            state.pending = NO_PENDING
            state.open_step = None
            state.next_step += 1
        elif kind == "step/start":
            step = data["step"]
            if type(turn) is not int or turn != state.open_turn or type(state.open_turn) is not int:
                return False
            if state.open_step is not None or type(step) is not int:
                return False
            if step != state.next_step or type(state.next_step) is not int:
                return False
            state.open_step = step
        elif kind == "turn/start":
            if type(turn) is not int or state.open_turn is not None:
                return False
            if turn != state.next_turn or type(state.next_turn) is not int:
                return False
            state.open_turn = turn
            state.next_step = 1
        elif kind == "turn/end":
            reason = data["reason"]
            if type(reason) is not dict or type(reason.get("kind")) is not str:
                return False
            if type(turn) is not int or turn != state.open_turn or type(state.open_turn) is not int:
                return False
            if state.open_step is not None:
                return False
            state.open_turn = None
            state.next_turn += 1
            state.last_turn_end_seq = seq
        else:
            return False
    except KeyError:  # a member these shapes need is missing: admit decides
        return False
    state.count += 1
    state.last_time = time
    state.last_type = kind
    return True


def admit_stored_chunks(state: LogState, events: Sequence[Any], start: int) -> int:
    """Admit the run of streamed chunks of the open step that begins at ``events[start]``: each exactly ``type``,
    ``seq``, ``time`` and ``data`` (integers where numbers are), ``data`` naming the open turn and step and holding
    a ``chunk`` object. Return the index just past the run (``start`` when the first is no such chunk); ``state``
    changes exactly as :func:`admit` would change it for each (anything else: :func:`admit` decides).

    Most of a log is such runs (a step streams tens to hundreds of chunks), so a run is checked in one loop that
    reads the open turn and step once and writes the state once.
    """
    turn = state.open_turn
    step = state.open_step
    if type(turn) is not int or type(step) is not int:
        return start
    seq = state.count
    index = start
    end = len(events)
    time = None
    while index < end:
        raw = events[index]
        if type(raw) is not dict or len(raw) != 4:
            break
        try:
            event_seq = raw["seq"]
            event_time = raw["time"]
            data = raw["data"]
            if (
                raw["type"] != CHUNK_TYPE
                or type(event_seq) is not int
                or event_seq != seq
                or type(event_time) is not int
                or not -MAX_SAFE_INTEGER <= event_time <= MAX_SAFE_INTEGER
                or type(data) is not dict
            ):
                break
            chunk_turn = data["turn"]
            chunk_step = data["step"]
            if (
                type(chunk_turn) is not int
                or chunk_turn != turn
                or type(chunk_step) is not int
                or chunk_step != step
                or type(data["chunk"]) is not dict
            ):
                break
        except KeyError:  # a member these shapes need is missing: admit decides
            break
        time = event_time
        seq += 1
        index += 1
    if index > start:
        state.count = seq
        state.last_time = time
        state.last_type = known_type(CHUNK_TYPE)
    return index


# -- envelope ------------------------------------------------------------------------------------------------------


def _envelope(state: LogState, raw: Any, *, appended: bool, now: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise Rejected("an event must be a JSON object {type, data, ...}")
    if not ENVELOPE_KEYS.issuperset(raw):
        extra = sorted(key for key in raw if key not in ENVELOPE_KEYS)
        raise Rejected(
            f"unknown top-level key {extra[0]!r}; an event has only type, data and the optional ignorable, "
            "surfaceOp and sourceEventSeqs"
        )
    kind = raw.get("type", UNDEFINED)
    if type(kind) is not str or kind not in CHECKED_TYPES:
        check_type(kind)
    seq = state.count
    if appended:
        if "seq" in raw or "time" in raw:
            raise Rejected("an appended event must not carry 'seq' or 'time'; the server assigns them")
        time = now if state.last_time is None else max(now, state.last_time)
    else:
        given_seq = raw.get("seq", UNDEFINED)
        if given_seq is not UNDEFINED and not (is_safe_integer(given_seq) and given_seq == seq):
            raise Rejected(f"'seq' is {js_str(given_seq)} but must equal the event's index {seq} (or be left out)")
        given_time = raw.get("time", UNDEFINED)
        if given_time is UNDEFINED:
            time = now if state.last_time is None else max(now, state.last_time)
        elif is_safe_integer(given_time):
            time = int(given_time)
        else:
            raise Rejected("'time' must be an integer of epoch milliseconds (or be left out)")
    if "data" not in raw:
        raise Rejected("'data' is required (null is allowed where the type does not constrain it)")
    if "ignorable" in raw and raw["ignorable"] is not True:
        raise Rejected("'ignorable' may only be true (or be left out)")
    if not appended and type(raw.get("seq")) is int and type(raw.get("time")) is int:
        return raw  # already the stored form (a recovered line, or a seed event with its own seq and time)
    event: dict[str, Any] = {"type": kind, "seq": seq, "time": time, "data": raw["data"]}
    for key in ("surfaceOp", "sourceEventSeqs", "ignorable"):
        if key in raw:
            event[key] = raw[key]
    return event


# -- surface -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replace:
    start: int
    end: int


def _surface(state: LogState, event: dict[str, Any], event_at: EventLookup) -> Replace | str | None:
    kind = event["type"]
    if kind not in SURFACE_TYPES:
        if "surfaceOp" in event:
            raise Rejected(f"{kind} is not a surface event and cannot carry surfaceOp")
        if "sourceEventSeqs" in event:
            raise Rejected(f"{kind} is not a surface event and cannot carry sourceEventSeqs")
        return None
    op = event.get("surfaceOp", UNDEFINED)
    if op is UNDEFINED:
        raise Rejected(
            f'{kind} is a surface event and requires surfaceOp: "append" or {{"op": "replace", "start", "end"}}'
        )
    if op == "append":
        _provenance(event, [])
        return "append"
    if not isinstance(op, dict):
        raise Rejected(f'{kind} carries an invalid surfaceOp: use "append" or {{"op": "replace", "start", "end"}}')
    if not (
        len(op) == 3
        and strict_equal(op.get("op", UNDEFINED), "replace")
        and is_event_seq(op.get("start"))
        and is_event_seq(op.get("end"))
    ):
        raise Rejected(
            f'{kind} carries an invalid replace surfaceOp: exactly op "replace", start and end, '
            "with start and end non-negative integers"
        )
    start, end = int(op["start"]), int(op["end"])
    nodes = state.nodes
    try:
        start_at = nodes.index(start)
    except ValueError:
        raise Rejected(f"surface replace: start seq {start} is not a current surface node") from None
    try:
        end_at = nodes.index(end)
    except ValueError:
        raise Rejected(f"surface replace: end seq {end} is not a current surface node") from None
    if start_at > end_at:
        raise Rejected(f"surface replace: start seq {start} comes after end seq {end} in the current surface")
    shadowed = nodes[start_at : end_at + 1]
    _provenance(event, shadowed)
    if kind == "tool/result":
        _tool_result_rewrite(event, shadowed, event_at)
    return Replace(start, end)


def _provenance(event: dict[str, Any], shadowed: list[int]) -> None:
    raw = event.get("sourceEventSeqs", UNDEFINED)
    sources: set[float] = set()
    if raw is not UNDEFINED:
        if not isinstance(raw, list):
            raise Rejected("sourceEventSeqs must be an array of earlier seqs")
        if not raw and event["type"] not in EMPTY_SOURCES_TYPES:
            raise Rejected("sourceEventSeqs must not be empty except on assistant/message")
        later = None
        # Plain earlier seqs (an assistant message cites its ~100 chunks) are checked at once: their types in one
        # pass, their range from one sort (min() and max() compare one pair at a time, several times slower).
        ordered = sorted(raw) if _ONLY_INTEGERS.issuperset(map(type, raw)) else None
        if ordered is not None and (not ordered or (ordered[0] >= 0 and ordered[-1] < event["seq"])):
            sources = set(raw)
        else:
            for source in raw:
                if not is_event_seq(source):
                    raise Rejected("sourceEventSeqs must hold only non-negative integer seqs")
                sources.add(source)
                if later is None and source >= event["seq"]:
                    later = source
        if len(sources) != len(raw):
            raise Rejected("sourceEventSeqs must not contain duplicates")
        if later is not None:
            raise Rejected(
                f"sourceEventSeqs must reference earlier events: {js_str(later)} >= current seq {event['seq']}"
            )
    missing = [seq for seq in shadowed if seq not in sources]
    if missing:
        raise Rejected(
            "surface replace: sourceEventSeqs must include every replaced surface node; missing "
            + ", ".join(str(seq) for seq in missing)
        )


def _without_result_content(data: Any) -> Any:
    rest = dict(data)
    message = dict(data["message"])
    message["content"] = [{**message["content"][0], "content": None}]
    rest["message"] = message
    return rest


def _tool_result_rewrite(event: dict[str, Any], shadowed: list[int], event_at: EventLookup) -> None:
    if len(shadowed) != 1:
        raise Rejected("a tool/result surface replacement must replace exactly one current node")
    original = event_at(shadowed[0])
    if original["type"] != "tool/result":
        raise Rejected("a tool/result surface replacement must replace a current tool/result")
    if not json_equal(_without_result_content(original["data"]), _without_result_content(event["data"])):
        raise Rejected("a tool/result surface replacement may change only message.content[0].content")


# -- relations (DSH's invariant companion) -------------------------------------------------------------------------


def _relations(state: LogState, event: dict[str, Any], op: Replace | str | None) -> None:
    kind = event["type"]
    data = event["data"]
    if kind == "assistant/chunk":  # most events of a log: checked first
        _require_open_step(state, kind, data)
    elif kind == "turn/start":
        turn = js_get(data, "turn")
        if state.open_turn is not None:
            raise Rejected(f"turn/start {js_str(turn)} while turn {js_str(state.open_turn)} is still open")
        if not strict_equal(turn, state.next_turn):
            raise Rejected(f"turn/start expected turn {js_str(state.next_turn)}, got {js_str(turn)}")
        state.open_turn = turn
        state.next_step = 1
    elif kind == "turn/end":
        turn = js_get(data, "turn")
        if not strict_equal(state.open_turn, turn):
            raise Rejected(f"turn/end {js_str(turn)} does not match open turn {js_str(state.open_turn)}")
        if state.open_step is not None:
            raise Rejected(f"turn/end {js_str(turn)} while step {js_str(state.open_step)} is still open")
        state.open_turn = None
        state.next_turn += 1
    elif kind == "step/start":
        turn, step = js_get(data, "turn"), js_get(data, "step")
        if not strict_equal(state.open_turn, turn):
            raise Rejected(f"step/start in turn {js_str(turn)} but open turn is {js_str(state.open_turn)}")
        if state.open_step is not None:
            raise Rejected(f"step/start {js_str(step)} while step {js_str(state.open_step)} is still open")
        if not strict_equal(step, state.next_step):
            raise Rejected(
                f"step/start expected step {js_str(state.next_step)} in turn {js_str(turn)}, got {js_str(step)}"
            )
        state.open_step = step
    elif kind in _STEP_SCOPED or (kind == "tool/result" and op == "append"):
        _require_open_step(state, kind, data)
        if kind == "step/end":
            state.pending = NO_PENDING
            state.open_step = None
            state.next_step += 1
        elif kind == "tool/call":
            state.own_pending().add(data["callId"])
        elif kind == "tool/result":
            message = data["message"]
            call_id = message["source"]["callId"]
            error = js_get(data, "error")
            error_code = UNDEFINED if error is None or error is UNDEFINED else js_get(error, "code")
            not_started = message["content"][0].get("isError") is True and strict_equal(error_code, TOOL_NOT_STARTED)
            if call_id not in state.pending and not not_started:
                raise Rejected(f"tool/result for {call_id} with no prior tool/call in this step")
            if call_id in state.pending:
                state.own_pending().discard(call_id)
    elif kind == "tool/result":
        if state.open_turn is None:
            raise Rejected("tool/result surface replacement appended outside any open turn")
    elif kind in _TURN_ENCLOSED and state.open_turn is None:
        raise Rejected(f"{kind} appended outside any open turn (core execution events must be turn-enclosed)")
    if isinstance(op, Replace):
        nodes = state.own_nodes()
        start_at, end_at = nodes.index(op.start), nodes.index(op.end)
        nodes[start_at : end_at + 1] = [event["seq"]]
    elif op == "append":
        state.own_nodes().append(event["seq"])


def _require_open_step(state: LogState, kind: str, data: Any) -> None:
    turn, step = js_get(data, "turn"), js_get(data, "step")
    if not strict_equal(state.open_turn, turn) or not strict_equal(state.open_step, step):
        raise Rejected(
            f"{kind} names turn {js_str(turn)}/step {js_str(step)} but open is turn "
            f"{js_str(state.open_turn)}/step {js_str(state.open_step)}"
        )
