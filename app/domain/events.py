"""The rules every event obeys on its way into a session log (spec section 1).

One function, :func:`admit`, checks one candidate against the log's running :class:`LogState` and returns the
event as it will be stored. The relational rules are a faithful port of DSH's invariant companion, including its
JavaScript ``===`` comparisons, so that a seed DSH accepts is accepted here and one it refuses is refused; forklog's
own stricter rules (spec 1.4, "Parity with DSH") are added on top.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from app.domain.errors import EventRejected
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

__all__ = [
    "ENVELOPE_KEYS",
    "MAX_TYPE_LENGTH",
    "NO_PENDING",
    "STORAGE_TAGS",
    "SURFACE_TYPES",
    "EventLookup",
    "LogState",
    "admit",
    "admit_stored",
    "known_type",
]

SURFACE_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})
STORAGE_TAGS = frozenset({"session", "text-chunks", "reasoning-chunks", "tool-call-chunks"})
ENVELOPE_KEYS = frozenset({"type", "seq", "time", "data", "surfaceOp", "sourceEventSeqs", "ignorable"})
MAX_TYPE_LENGTH = 256
TOOL_NOT_STARTED = "TOOL_NOT_STARTED"

_TURN_ENCLOSED = frozenset({"todo/write", "request/header", "request/context"})
_STEP_SCOPED = frozenset({"step/end", "assistant/chunk", "assistant/message", "tool/call"})
_ADAPTER_KEYS = frozenset({"reasoningEffort", "maxTokens"})

EventLookup = Callable[[int], dict[str, Any]]
# The pending tool calls of a log with none (most logs, at every turn/end): one object shared by all of them.
NO_PENDING: frozenset[Any] = frozenset()


class _Rejected(Exception):
    """Raised inside the checks; :func:`admit` adds the index."""


@dataclass(slots=True)
class LogState:
    """What the rules need to know about a log so far; it grows by O(1) per event.

    ``open_turn`` .. ``pending`` mirror DSH's invariant trace (JavaScript values: ``None`` is ``null``). ``nodes``
    is the current model-visible surface (seqs in order). A committed state is never changed again: staging a batch
    works on a copy (:meth:`staged`) that shares ``nodes`` and ``pending`` until the batch first changes them, so an
    append without surface events or tool calls copies nothing big, and logs without pending calls share one empty
    set.
    """

    count: int = 0
    last_time: int | None = None
    last_type: str | None = None
    last_turn_end_seq: int | None = None
    open_turn: Any = None
    open_step: Any = None
    next_turn: Any = 1
    next_step: Any = 1
    pending: Set[Any] = NO_PENDING
    nodes: list[int] = field(default_factory=list)
    nodes_shared: bool = False
    # What the Session resource says of the log (spec 12), kept as it grows: the bytes of its stored lines, the
    # title of its last session/title event (and that event's seq), the preview of its first user/message (and its
    # seq). The seqs let a fork's seed tell whether the value is also its own.
    body_bytes: int = 0
    title: str | None = None
    title_seq: int | None = None
    preview: str | None = None
    preview_seq: int | None = None

    def columns(self) -> list[Any]:
        """What a store keeps of this state, in a fixed order: all but ``count`` and ``nodes``, which it keeps its
        own way. The pending calls are sorted (by their text), so that equal states are stored as equal bytes."""
        return [
            self.last_time,
            self.last_type,
            self.last_turn_end_seq,
            self.open_turn,
            self.open_step,
            self.next_turn,
            self.next_step,
            sorted(self.pending, key=str),
            self.body_bytes,
            self.title,
            self.title_seq,
            self.preview,
            self.preview_seq,
        ]

    @classmethod
    def of_columns(cls, columns: Sequence[Any], *, count: int, nodes: list[int] | None = None) -> LogState:
        """The state whose :meth:`columns` these are, after ``count`` events (with ``nodes``, if known)."""
        (
            last_time,
            last_type,
            last_turn_end_seq,
            open_turn,
            open_step,
            next_turn,
            next_step,
            pending,
            body_bytes,
            title,
            title_seq,
            preview,
            preview_seq,
        ) = columns  # a ValueError for columns stored by an older forklog: such a record is not used
        if not (isinstance(body_bytes, int) and body_bytes >= 0):
            raise ValueError("the stored byte count is not a count")
        return cls(
            count=count,
            last_time=last_time,
            last_type=known_type(last_type) if isinstance(last_type, str) else last_type,
            last_turn_end_seq=last_turn_end_seq,
            open_turn=open_turn,
            open_step=open_step,
            next_turn=next_turn,
            next_step=next_step,
            pending=frozenset(pending) if pending else NO_PENDING,
            nodes=nodes if nodes is not None else [],
            body_bytes=body_bytes,
            title=title,
            title_seq=title_seq,
            preview=preview,
            preview_seq=preview_seq,
        )

    def staged(self) -> LogState:
        pending = self.pending
        return LogState(
            count=self.count,
            last_time=self.last_time,
            last_type=self.last_type,
            last_turn_end_seq=self.last_turn_end_seq,
            open_turn=self.open_turn,
            open_step=self.open_step,
            next_turn=self.next_turn,
            next_step=self.next_step,
            pending=pending if type(pending) is frozenset else frozenset(pending),
            nodes=self.nodes,
            nodes_shared=True,
            body_bytes=self.body_bytes,
            title=self.title,
            title_seq=self.title_seq,
            preview=self.preview,
            preview_seq=self.preview_seq,
        )

    def own_nodes(self) -> list[int]:
        if self.nodes_shared:
            self.nodes = list(self.nodes)
            self.nodes_shared = False
        return self.nodes

    def own_pending(self) -> set[Any]:
        """``pending`` as a set this (staged) state may change."""
        pending = self.pending
        if not isinstance(pending, set):
            pending = self.pending = set(pending)
        return pending

    def freeze(self) -> None:
        """Make ``pending`` immutable again once a batch is checked (an empty one is the shared NO_PENDING)."""
        if type(self.pending) is not frozenset or (not self.pending and self.pending is not NO_PENDING):
            self.pending = frozenset(self.pending) if self.pending else NO_PENDING


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
            raise _Rejected(f"the event cannot be stored losslessly: {lossless_break}")
        event = _envelope(state, raw, appended=appended, now=now)
        _shapes(event)
        op = _surface(state, event, event_at)
        _relations(state, event, op)
    except _Rejected as rejected:
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
    ``assistant/chunk``, ``step/start``, ``step/end``, ``turn/start`` or ``turn/end``, that the rules let through.
    Then ``state`` changes exactly as :func:`admit` would change it (which would return ``raw`` itself) and True;
    else nothing changes and False: :func:`admit` decides (and says why it refuses).

    A start checks every stored event; most of a log is these few shapes (streamed chunks above all), and the
    general checks cost several times the parsing of the line.
    """
    if type(raw) is not dict or len(raw) != 4:
        return False
    try:  # (subscripts: a start runs this for most events of a log, and a method call costs more)
        seq = raw["seq"]
        time = raw["time"]
        data = raw["data"]
        kind = _CHECKED_TYPES[raw["type"]]  # a type already found well-formed
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
        if kind == "assistant/chunk" or kind == "step/end":
            step = data["step"]
            if type(turn) is not int or turn != state.open_turn or type(state.open_turn) is not int:
                return False
            if type(step) is not int or step != state.open_step or type(state.open_step) is not int:
                return False
            if kind == "step/end":
                state.pending = NO_PENDING
                state.open_step = None
                state.next_step += 1
            elif type(data["chunk"]) is not dict:
                return False
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


# -- envelope ------------------------------------------------------------------------------------------------------


def _envelope(state: LogState, raw: Any, *, appended: bool, now: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _Rejected("an event must be a JSON object {type, data, ...}")
    if not ENVELOPE_KEYS.issuperset(raw):
        extra = sorted(key for key in raw if key not in ENVELOPE_KEYS)
        raise _Rejected(
            f"unknown top-level key {extra[0]!r}; an event has only type, data and the optional ignorable, "
            "surfaceOp and sourceEventSeqs"
        )
    kind = raw.get("type", UNDEFINED)
    if type(kind) is not str or kind not in _CHECKED_TYPES:
        _check_type(kind)
    seq = state.count
    if appended:
        if "seq" in raw or "time" in raw:
            raise _Rejected("an appended event must not carry 'seq' or 'time'; the server assigns them")
        time = now if state.last_time is None else max(now, state.last_time)
    else:
        given_seq = raw.get("seq", UNDEFINED)
        if given_seq is not UNDEFINED and not (is_safe_integer(given_seq) and given_seq == seq):
            raise _Rejected(f"'seq' is {js_str(given_seq)} but must equal the event's index {seq} (or be left out)")
        given_time = raw.get("time", UNDEFINED)
        if given_time is UNDEFINED:
            time = now if state.last_time is None else max(now, state.last_time)
        elif is_safe_integer(given_time):
            time = int(given_time)
        else:
            raise _Rejected("'time' must be an integer of epoch milliseconds (or be left out)")
    if "data" not in raw:
        raise _Rejected("'data' is required (null is allowed where the type does not constrain it)")
    if "ignorable" in raw and raw["ignorable"] is not True:
        raise _Rejected("'ignorable' may only be true (or be left out)")
    if not appended and type(raw.get("seq")) is int and type(raw.get("time")) is int:
        return raw  # already the stored form (a recovered line, or a seed event with its own seq and time)
    event: dict[str, Any] = {"type": kind, "seq": seq, "time": time, "data": raw["data"]}
    for key in ("surfaceOp", "sourceEventSeqs", "ignorable"):
        if key in raw:
            event[key] = raw[key]
    return event


# Types already found well-formed; a log repeats a handful of them, so each is checked once (and each log's state
# refers to one shared string per type instead of its own copy).
_CHECKED_TYPES: dict[str, str] = {}
_CHECKED_TYPES_LIMIT = 4096


def known_type(kind: str) -> str:
    """The one shared string equal to ``kind`` when it is a type already seen, else ``kind``."""
    return _CHECKED_TYPES.get(kind, kind)


def _check_type(kind: Any) -> None:
    if not isinstance(kind, str):
        raise _Rejected("'type' must be a string such as \"turn/start\"")
    if kind == "":
        raise _Rejected("'type' must not be empty")
    if len(kind) > MAX_TYPE_LENGTH:
        raise _Rejected(f"'type' is {len(kind)} characters long; at most {MAX_TYPE_LENGTH} are allowed")
    if kind in STORAGE_TAGS:
        raise _Rejected(f"{kind!r} is a storage tag of the log format, not an event type")
    if kind == "request/header-delta":
        raise _Rejected("request/header-delta is the unsupported legacy format; send a full request/header")
    if len(_CHECKED_TYPES) < _CHECKED_TYPES_LIMIT:
        _CHECKED_TYPES[kind] = kind


# -- per-type shapes -----------------------------------------------------------------------------------------------


def _has_provider_model(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("provider"), str)
        and value["provider"] != ""
        and isinstance(value.get("model"), str)
        and value["model"] != ""
    )


def _shapes(event: dict[str, Any]) -> None:
    kind = event["type"]
    data = event["data"]
    if kind in SURFACE_TYPES:
        _message_shape(kind, data)
    elif kind == "request/header":
        _request_header_shape(data)
    elif kind == "turn/end":
        reason = data.get("reason") if isinstance(data, dict) else None
        if not isinstance(reason, dict) or not isinstance(reason.get("kind"), str):
            raise _Rejected('turn/end needs data.reason, an object with a string kind such as {"kind": "completed"}')
    elif kind == "tool/call":
        if not isinstance(data, dict):
            raise _Rejected("tool/call needs data {turn, step, callId, name, arguments}")
        call_id = data.get("callId")
        if not isinstance(call_id, str) or call_id == "":
            raise _Rejected("tool/call needs data.callId, a non-empty string")
        if not isinstance(data.get("name"), str):
            raise _Rejected("tool/call needs data.name, a string")
        if not isinstance(data.get("arguments"), str):
            raise _Rejected("tool/call needs data.arguments, a string (the raw JSON text of the arguments)")
    elif kind == "assistant/chunk" and not (isinstance(data, dict) and isinstance(data.get("chunk"), dict)):
        raise _Rejected("assistant/chunk needs data.chunk, an object")


def _message_shape(kind: str, data: Any) -> None:
    message = data if kind == "user/message" else (data.get("message") if isinstance(data, dict) else None)
    where = "data" if kind == "user/message" else "data.message"
    if not isinstance(message, dict) or not isinstance(message.get("id"), str) or message["id"] == "":
        raise _Rejected(f"{kind} lacks an identified message: {where} needs a non-empty string id")
    role = "assistant" if kind == "assistant/message" else "user"
    if not strict_equal(message.get("role", UNDEFINED), role):
        raise _Rejected(f'{kind}: {where}.role must be "{role}"')
    source = message.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("kind"), str) or source["kind"] == "":
        raise _Rejected(f"{kind}: {where}.source must be an object with a non-empty string kind")
    if not isinstance(message.get("content"), list):
        raise _Rejected(f"{kind}: {where}.content must be an array of content blocks")
    if kind == "assistant/message":
        if source["kind"] != "model" or not _has_provider_model(source):
            raise _Rejected(
                'assistant/message: data.message.source must be {"kind": "model", "provider", "model"} '
                "with non-empty provider and model"
            )
        return
    if kind != "tool/result":
        return
    call_id = source.get("callId")
    if source["kind"] != "tool" or not isinstance(call_id, str) or call_id == "":
        raise _Rejected('tool/result: data.message.source must be {"kind": "tool", "callId"} with a non-empty callId')
    content = message["content"]
    block = content[0] if content else None
    if (
        len(content) != 1
        or not isinstance(block, dict)
        or not strict_equal(block.get("type", UNDEFINED), "tool-result")
        or not isinstance(block.get("content"), list)
    ):
        raise _Rejected(
            "tool/result: data.message.content must be exactly one "
            '{"type": "tool-result", "toolCallId", "content": [...]} block'
        )
    if not strict_equal(block.get("toolCallId", UNDEFINED), call_id):
        raise _Rejected("tool/result: the block's toolCallId must equal data.message.source.callId")


def _request_header_shape(data: Any) -> None:
    header = data.get("header") if isinstance(data, dict) else None
    header_record = header if isinstance(header, dict) else None
    config = header_record.get("config") if header_record is not None else None
    if not _has_provider_model(config):
        raise _Rejected("request/header needs data.header.config with non-empty string provider and model")
    assert isinstance(config, dict)
    effort = config.get("reasoningEffort", UNDEFINED)
    if effort is not UNDEFINED and (not isinstance(effort, str) or effort == ""):
        raise _Rejected("request/header: data.header.config.reasoningEffort, when present, must be a non-empty string")
    defaults = header_record.get("adapterDefaults", UNDEFINED) if header_record is not None else UNDEFINED
    if defaults is not UNDEFINED and (
        not isinstance(defaults, dict)
        or any(key not in _ADAPTER_KEYS for key in defaults)
        or any(marker is not True for marker in defaults.values())
        or (defaults.get("reasoningEffort") is True and "reasoningEffort" not in config)
        or (defaults.get("maxTokens") is True and "maxTokens" not in config)
    ):
        raise _Rejected(
            "request/header: data.header.adapterDefaults may hold only reasoningEffort: true and maxTokens: true, "
            "each only where the matching config field is set"
        )
    if isinstance(data, dict) and strict_equal(data.get("reason", UNDEFINED), "fallback"):
        raise _Rejected('request/header reason "fallback" is the unsupported legacy format')


# -- surface -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replace:
    start: int
    end: int


def _surface(state: LogState, event: dict[str, Any], event_at: EventLookup) -> Replace | str | None:
    kind = event["type"]
    if kind not in SURFACE_TYPES:
        if "surfaceOp" in event:
            raise _Rejected(f"{kind} is not a surface event and cannot carry surfaceOp")
        if "sourceEventSeqs" in event:
            raise _Rejected(f"{kind} is not a surface event and cannot carry sourceEventSeqs")
        return None
    op = event.get("surfaceOp", UNDEFINED)
    if op is UNDEFINED:
        raise _Rejected(
            f'{kind} is a surface event and requires surfaceOp: "append" or {{"op": "replace", "start", "end"}}'
        )
    if op == "append":
        _provenance(event, [])
        return "append"
    if not isinstance(op, dict):
        raise _Rejected(f'{kind} carries an invalid surfaceOp: use "append" or {{"op": "replace", "start", "end"}}')
    if not (
        len(op) == 3
        and strict_equal(op.get("op", UNDEFINED), "replace")
        and is_event_seq(op.get("start"))
        and is_event_seq(op.get("end"))
    ):
        raise _Rejected(
            f'{kind} carries an invalid replace surfaceOp: exactly op "replace", start and end, '
            "with start and end non-negative integers"
        )
    start, end = int(op["start"]), int(op["end"])
    nodes = state.nodes
    try:
        start_at = nodes.index(start)
    except ValueError:
        raise _Rejected(f"surface replace: start seq {start} is not a current surface node") from None
    try:
        end_at = nodes.index(end)
    except ValueError:
        raise _Rejected(f"surface replace: end seq {end} is not a current surface node") from None
    if start_at > end_at:
        raise _Rejected(f"surface replace: start seq {start} comes after end seq {end} in the current surface")
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
            raise _Rejected("sourceEventSeqs must be an array of earlier seqs")
        if not raw and event["type"] != "assistant/message":
            raise _Rejected("sourceEventSeqs must not be empty except on assistant/message")
        later = None
        if all(type(source) is int for source in raw) and (not raw or (min(raw) >= 0 and max(raw) < event["seq"])):
            sources = set(raw)  # plain earlier seqs (an assistant message cites its ~100 chunks): checked at once
        else:
            for source in raw:
                if not is_event_seq(source):
                    raise _Rejected("sourceEventSeqs must hold only non-negative integer seqs")
                sources.add(source)
                if later is None and source >= event["seq"]:
                    later = source
        if len(sources) != len(raw):
            raise _Rejected("sourceEventSeqs must not contain duplicates")
        if later is not None:
            raise _Rejected(
                f"sourceEventSeqs must reference earlier events: {js_str(later)} >= current seq {event['seq']}"
            )
    missing = [seq for seq in shadowed if seq not in sources]
    if missing:
        raise _Rejected(
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
        raise _Rejected("a tool/result surface replacement must replace exactly one current node")
    original = event_at(shadowed[0])
    if original["type"] != "tool/result":
        raise _Rejected("a tool/result surface replacement must replace a current tool/result")
    if not json_equal(_without_result_content(original["data"]), _without_result_content(event["data"])):
        raise _Rejected("a tool/result surface replacement may change only message.content[0].content")


# -- relations (DSH's invariant companion) -------------------------------------------------------------------------


def _relations(state: LogState, event: dict[str, Any], op: Replace | str | None) -> None:
    kind = event["type"]
    data = event["data"]
    if kind == "assistant/chunk":  # most events of a log: checked first
        _require_open_step(state, kind, data)
    elif kind == "turn/start":
        turn = js_get(data, "turn")
        if state.open_turn is not None:
            raise _Rejected(f"turn/start {js_str(turn)} while turn {js_str(state.open_turn)} is still open")
        if not strict_equal(turn, state.next_turn):
            raise _Rejected(f"turn/start expected turn {js_str(state.next_turn)}, got {js_str(turn)}")
        state.open_turn = turn
        state.next_step = 1
    elif kind == "turn/end":
        turn = js_get(data, "turn")
        if not strict_equal(state.open_turn, turn):
            raise _Rejected(f"turn/end {js_str(turn)} does not match open turn {js_str(state.open_turn)}")
        if state.open_step is not None:
            raise _Rejected(f"turn/end {js_str(turn)} while step {js_str(state.open_step)} is still open")
        state.open_turn = None
        state.next_turn += 1
    elif kind == "step/start":
        turn, step = js_get(data, "turn"), js_get(data, "step")
        if not strict_equal(state.open_turn, turn):
            raise _Rejected(f"step/start in turn {js_str(turn)} but open turn is {js_str(state.open_turn)}")
        if state.open_step is not None:
            raise _Rejected(f"step/start {js_str(step)} while step {js_str(state.open_step)} is still open")
        if not strict_equal(step, state.next_step):
            raise _Rejected(
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
                raise _Rejected(f"tool/result for {call_id} with no prior tool/call in this step")
            if call_id in state.pending:
                state.own_pending().discard(call_id)
    elif kind == "tool/result":
        if state.open_turn is None:
            raise _Rejected("tool/result surface replacement appended outside any open turn")
    elif kind in _TURN_ENCLOSED and state.open_turn is None:
        raise _Rejected(f"{kind} appended outside any open turn (core execution events must be turn-enclosed)")
    if isinstance(op, Replace):
        nodes = state.own_nodes()
        start_at, end_at = nodes.index(op.start), nodes.index(op.end)
        nodes[start_at : end_at + 1] = [event["seq"]]
    elif op == "append":
        state.own_nodes().append(event["seq"])


def _require_open_step(state: LogState, kind: str, data: Any) -> None:
    turn, step = js_get(data, "turn"), js_get(data, "step")
    if not strict_equal(state.open_turn, turn) or not strict_equal(state.open_step, step):
        raise _Rejected(
            f"{kind} names turn {js_str(turn)}/step {js_str(step)} but open is turn "
            f"{js_str(state.open_turn)}/step {js_str(state.open_step)}"
        )
