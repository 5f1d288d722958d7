"""The shapes events must have (spec 1.4): a well-formed ``type``, and the members each type of the core vocabulary
needs. The relations between events (turns, steps, calls) are :mod:`app.domain.events`' part.

The core vocabulary (spec 1.2) is :data:`CORE_TYPES`, written once: each type with the check of its ``data`` and that
shape as JSON Schema (:mod:`app.domain.shape_schemas`). The rules check by it and the OpenAPI document is made from
it (:mod:`app.api.wire.schemas`), so a type added here is checked and documented alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.domain.jsonvalue import UNDEFINED, strict_equal
from app.domain.shape_schemas import ANY_JSON, Schema, shape

__all__ = [
    "CHECKED_TYPES",
    "CORE_TYPES",
    "EMPTY_SOURCES_TYPES",
    "MAX_TYPE_LENGTH",
    "REFUSED_TYPES",
    "STORAGE_TAGS",
    "SURFACE_TYPES",
    "CoreType",
    "Rejected",
    "check_shapes",
    "check_type",
    "known_type",
]

STORAGE_TAGS = frozenset({"session", "text-chunks", "reasoning-chunks", "tool-call-chunks"})
LEGACY_HEADER_DELTA = "request/header-delta"
# Types no event may have: the storage tags of the log format, and a legacy type DSH no longer writes.
REFUSED_TYPES = frozenset({LEGACY_HEADER_DELTA, *STORAGE_TAGS})
MAX_TYPE_LENGTH = 256

_ADAPTER_KEYS = frozenset({"reasoningEffort", "maxTokens"})


class Rejected(Exception):
    """Raised inside the checks; :func:`app.domain.events.admit` adds the event's index."""


# Types already found well-formed; a log repeats a handful of them, so each is checked once (and each log's state
# refers to one shared string per type instead of its own copy).
CHECKED_TYPES: dict[str, str] = {}
_CHECKED_TYPES_LIMIT = 4096


def known_type(kind: str) -> str:
    """The one shared string equal to ``kind`` when it is a type already seen, else ``kind``."""
    return CHECKED_TYPES.get(kind, kind)


def check_type(kind: Any) -> None:
    if not isinstance(kind, str):
        raise Rejected("'type' must be a string such as \"turn/start\"")
    if kind == "":
        raise Rejected("'type' must not be empty")
    if len(kind) > MAX_TYPE_LENGTH:
        raise Rejected(f"'type' is {len(kind)} characters long; at most {MAX_TYPE_LENGTH} are allowed")
    if kind in STORAGE_TAGS:
        raise Rejected(f"{kind!r} is a storage tag of the log format, not an event type")
    if kind == LEGACY_HEADER_DELTA:
        raise Rejected("request/header-delta is the unsupported legacy format; send a full request/header")
    if len(CHECKED_TYPES) < _CHECKED_TYPES_LIMIT:
        CHECKED_TYPES[kind] = kind


# -- per-type shapes -----------------------------------------------------------------------------------------------


def _has_provider_model(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("provider"), str)
        and value["provider"] != ""
        and isinstance(value.get("model"), str)
        and value["model"] != ""
    )


def _turn_end(data: Any) -> None:
    reason = data.get("reason") if isinstance(data, dict) else None
    if not isinstance(reason, dict) or not isinstance(reason.get("kind"), str):
        raise Rejected('turn/end needs data.reason, an object with a string kind such as {"kind": "completed"}')


def _tool_call(data: Any) -> None:
    if not isinstance(data, dict):
        raise Rejected("tool/call needs data {turn, step, callId, name, arguments}")
    call_id = data.get("callId")
    if not isinstance(call_id, str) or call_id == "":
        raise Rejected("tool/call needs data.callId, a non-empty string")
    if not isinstance(data.get("name"), str):
        raise Rejected("tool/call needs data.name, a string")
    if not isinstance(data.get("arguments"), str):
        raise Rejected("tool/call needs data.arguments, a string (the raw JSON text of the arguments)")


def _assistant_chunk(data: Any) -> None:
    if not (isinstance(data, dict) and isinstance(data.get("chunk"), dict)):
        raise Rejected("assistant/chunk needs data.chunk, an object")


def _user_message(data: Any) -> None:
    _message_shape("user/message", data)


def _assistant_message(data: Any) -> None:
    _message_shape("assistant/message", data)


def _tool_result(data: Any) -> None:
    _message_shape("tool/result", data)


def _message_shape(kind: str, data: Any) -> None:
    message = data if kind == "user/message" else (data.get("message") if isinstance(data, dict) else None)
    where = "data" if kind == "user/message" else "data.message"
    if not isinstance(message, dict) or not isinstance(message.get("id"), str) or message["id"] == "":
        raise Rejected(f"{kind} lacks an identified message: {where} needs a non-empty string id")
    role = "assistant" if kind == "assistant/message" else "user"
    if not strict_equal(message.get("role", UNDEFINED), role):
        raise Rejected(f'{kind}: {where}.role must be "{role}"')
    source = message.get("source")
    if not isinstance(source, dict) or not isinstance(source.get("kind"), str) or source["kind"] == "":
        raise Rejected(f"{kind}: {where}.source must be an object with a non-empty string kind")
    if not isinstance(message.get("content"), list):
        raise Rejected(f"{kind}: {where}.content must be an array of content blocks")
    if kind == "assistant/message":
        if source["kind"] != "model" or not _has_provider_model(source):
            raise Rejected(
                'assistant/message: data.message.source must be {"kind": "model", "provider", "model"} '
                "with non-empty provider and model"
            )
        return
    if kind != "tool/result":
        return
    call_id = source.get("callId")
    if source["kind"] != "tool" or not isinstance(call_id, str) or call_id == "":
        raise Rejected('tool/result: data.message.source must be {"kind": "tool", "callId"} with a non-empty callId')
    content = message["content"]
    block = content[0] if content else None
    if (
        len(content) != 1
        or not isinstance(block, dict)
        or not strict_equal(block.get("type", UNDEFINED), "tool-result")
        or not isinstance(block.get("content"), list)
    ):
        raise Rejected(
            "tool/result: data.message.content must be exactly one "
            '{"type": "tool-result", "toolCallId", "content": [...]} block'
        )
    if not strict_equal(block.get("toolCallId", UNDEFINED), call_id):
        raise Rejected("tool/result: the block's toolCallId must equal data.message.source.callId")


def _request_header_shape(data: Any) -> None:
    header = data.get("header") if isinstance(data, dict) else None
    header_record = header if isinstance(header, dict) else None
    config = header_record.get("config") if header_record is not None else None
    if not _has_provider_model(config):
        raise Rejected("request/header needs data.header.config with non-empty string provider and model")
    assert isinstance(config, dict)
    effort = config.get("reasoningEffort", UNDEFINED)
    if effort is not UNDEFINED and (not isinstance(effort, str) or effort == ""):
        raise Rejected("request/header: data.header.config.reasoningEffort, when present, must be a non-empty string")
    defaults = header_record.get("adapterDefaults", UNDEFINED) if header_record is not None else UNDEFINED
    if defaults is not UNDEFINED and (
        not isinstance(defaults, dict)
        or any(key not in _ADAPTER_KEYS for key in defaults)
        or any(marker is not True for marker in defaults.values())
        or (defaults.get("reasoningEffort") is True and "reasoningEffort" not in config)
        or (defaults.get("maxTokens") is True and "maxTokens" not in config)
    ):
        raise Rejected(
            "request/header: data.header.adapterDefaults may hold only reasoningEffort: true and maxTokens: true, "
            "each only where the matching config field is set"
        )
    if isinstance(data, dict) and strict_equal(data.get("reason", UNDEFINED), "fallback"):
        raise Rejected('request/header reason "fallback" is the unsupported legacy format')


# -- the core vocabulary (spec 1.2) ----------------------------------------------------------------------------------

DataCheck = Callable[[Any], None]


@dataclass(frozen=True, slots=True)
class CoreType:
    """One type of the core vocabulary: its name, its schemas' stem, the shape of its ``data`` and the check the
    rules run on it (None: not checked), whether it is a surface event (spec 1.3) and, if so, whether its
    ``sourceEventSeqs`` may be empty."""

    type: str
    stem: str
    data: Schema
    check: DataCheck | None = None
    surface: bool = False
    empty_sources: bool = False
    description: str = ""


CORE_TYPES: tuple[CoreType, ...] = (
    CoreType("turn/start", "TurnStart", shape("TurnStartData"), description="opens turn data.turn (1, 2, 3, ...)"),
    CoreType(
        "turn/end", "TurnEnd", shape("TurnEndData"), _turn_end, description="closes the open turn: a fork boundary"
    ),
    CoreType("step/start", "StepStart", shape("StepData"), description="opens step data.step of the open turn"),
    CoreType("step/end", "StepEnd", shape("StepData"), description="closes the open step"),
    CoreType(
        "user/message", "UserMessage", shape("Message"), _user_message, True, description="a user's message (role user)"
    ),
    CoreType(
        "assistant/chunk",
        "AssistantChunk",
        shape("AssistantChunkData"),
        _assistant_chunk,
        description="a streamed piece",
    ),
    CoreType(
        "assistant/message",
        "AssistantMessage",
        shape("AssistantMessageData"),
        _assistant_message,
        surface=True,
        empty_sources=True,
        description="the model's message",
    ),
    CoreType("tool/call", "ToolCall", shape("ToolCallData"), _tool_call, description="a tool call of the open step"),
    CoreType(
        "tool/result",
        "ToolResult",
        shape("ToolResultData"),
        _tool_result,
        True,
        description="a tool call's result (role user)",
    ),
    CoreType(
        "request/header",
        "RequestHeader",
        shape("RequestHeaderData"),
        _request_header_shape,
        description="inside a turn",
    ),
    CoreType("todo/write", "TodoWrite", ANY_JSON, description="inside a turn; data is not checked"),
    CoreType("request/context", "RequestContext", ANY_JSON, description="inside a turn; data is not checked"),
    CoreType("session/end-seed", "SessionEndSeed", ANY_JSON, description="anywhere; data is not checked"),
)

SURFACE_TYPES = frozenset(kind.type for kind in CORE_TYPES if kind.surface)
# The surface types whose sourceEventSeqs may be an empty list.
EMPTY_SOURCES_TYPES = frozenset(kind.type for kind in CORE_TYPES if kind.empty_sources)
_DATA_CHECKS: dict[str, DataCheck] = {kind.type: kind.check for kind in CORE_TYPES if kind.check is not None}


def check_shapes(event: dict[str, Any]) -> None:
    """The check of the event's ``data`` its type has in the core vocabulary (none for any other type)."""
    check = _DATA_CHECKS.get(event["type"])
    if check is not None:
        check(event["data"])
