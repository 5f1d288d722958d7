"""The shapes of the event vocabulary (spec 1.1 to 1.3) as JSON Schema: the envelope's numbers, a message, a surface
op, and each core type's ``data``. :data:`app.domain.event_shapes.CORE_TYPES` names, for each type, the shape of its
``data`` here beside the check the rules run on it; :mod:`app.api.wire.schemas` publishes both in the OpenAPI document.

A shape says what the rules check and no more (a member the rules leave open stays open), so a client built from it
never refuses a stored event; the relational rules (turn numbers, open steps, unanswered calls) are the server's.
Shapes refer to one another as ``#/$defs/<name>``: :data:`SHAPES` is the ``$defs`` of one JSON Schema document.
"""

from __future__ import annotations

from typing import Any

from app.domain.jsonvalue import MAX_SAFE_INTEGER

__all__ = [
    "ANY_JSON",
    "NON_EMPTY_TEXT",
    "NUMBER_FROM_ONE",
    "SEQ",
    "SHAPES",
    "SHAPE_ROOT",
    "TEXT",
    "TIME",
    "Schema",
    "json_object",
    "shape",
]

Schema = dict[str, Any]
SHAPE_ROOT = "#/$defs/"


def shape(name: str) -> Schema:
    """A reference to the shape ``name`` of :data:`SHAPES`."""
    return {"$ref": f"{SHAPE_ROOT}{name}"}


def json_object(properties: Schema, required: tuple[str, ...], *, open_: bool, description: str = "") -> Schema:
    schema: Schema = {"type": "object"}
    if description:
        schema["description"] = description
    schema["properties"] = properties
    if required:
        schema["required"] = list(required)
    schema["additionalProperties"] = open_
    return schema


SEQ: Schema = {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER}
TIME: Schema = {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER}
NUMBER_FROM_ONE: Schema = {"type": "integer", "minimum": 1, "maximum": MAX_SAFE_INTEGER}
TEXT: Schema = {"type": "string"}
NON_EMPTY_TEXT: Schema = {"type": "string", "minLength": 1}
ANY_JSON: Schema = {"description": "any JSON value"}

# -- messages (spec 1.2: a message; 1.3: the model history) ---------------------------------------------------------

# The rules check a message's id, role, content (an array) and source.kind; a content block is described as DSH
# writes one (an object with a type), its other members open.
_MESSAGES: dict[str, Schema] = {
    "ContentBlock": json_object(
        {"type": {**TEXT, "description": 'the block\'s kind: "text", "tool-result", ...'}, "text": TEXT},
        ("type",),
        open_=True,
        description="one block of a message's content: a text block carries `text`, other kinds their own members",
    ),
    "MessageSource": json_object(
        {
            "kind": {**NON_EMPTY_TEXT, "description": '"user", "model", "tool", ...'},
            "provider": TEXT,
            "model": TEXT,
            "callId": TEXT,
        },
        ("kind",),
        open_=True,
        description="who made a message: a model's names its provider and model, a tool result's its callId",
    ),
    "Message": json_object(
        {
            "id": NON_EMPTY_TEXT,
            "role": {**TEXT, "description": '"user" or "assistant"'},
            "content": {"type": "array", "items": shape("ContentBlock")},
            "source": shape("MessageSource"),
        },
        ("id", "role", "content", "source"),
        open_=True,
        description="a message of the model history, as user/message, assistant/message and tool/result carry it",
    ),
    "ReplaceOp": json_object(
        {"op": {"type": "string", "const": "replace"}, "start": SEQ, "end": SEQ},
        ("op", "start", "end"),
        open_=False,
        description="replace the current surface nodes from seq start through seq end with this event's message",
    ),
    # openapi-python-client (0.29) checks a const member of a union outside its try/except: the object comes
    # first, or its clients fail to parse an event that carries a replace.
    "SurfaceOp": {
        "description": 'how a surface event changes the model history: "append", or a replace',
        "oneOf": [shape("ReplaceOp"), {"type": "string", "const": "append"}],
    },
}

# -- the data of the core types (spec 1.2) ---------------------------------------------------------------------------


def _turn_step(description: str = "", **more: Schema) -> Schema:
    """The data of an event that names the open turn and step, with its own members (all required)."""
    members = {"turn": NUMBER_FROM_ONE, "step": NUMBER_FROM_ONE, **more}
    return json_object(members, ("turn", "step", *more), open_=True, description=description)


_DATA: dict[str, Schema] = {
    "TurnStartData": json_object({"turn": NUMBER_FROM_ONE}, ("turn",), open_=True),
    "TurnEndReason": json_object(
        {"kind": {**TEXT, "description": "completed, aborted, blocked, error, max-tokens, interrupted, or another"}},
        ("kind",),
        open_=True,
    ),
    "TurnEndData": json_object(
        {"turn": NUMBER_FROM_ONE, "reason": shape("TurnEndReason")}, ("turn", "reason"), open_=True
    ),
    "StepData": _turn_step(),
    "AssistantChunkData": _turn_step(chunk={"type": "object", "additionalProperties": True}),
    "AssistantMessageData": _turn_step(message=shape("Message")),
    "ToolCallData": _turn_step(callId=NON_EMPTY_TEXT, name=TEXT, arguments=TEXT),
    "ToolResultData": _turn_step(
        "message.content is exactly one block {type: tool-result, toolCallId, content: [...]}", message=shape("Message")
    ),
    "RequestConfig": json_object(
        {"provider": NON_EMPTY_TEXT, "model": NON_EMPTY_TEXT, "reasoningEffort": NON_EMPTY_TEXT},
        ("provider", "model"),
        open_=True,
    ),
    "AdapterDefaults": json_object(
        {"reasoningEffort": {"type": "boolean", "const": True}, "maxTokens": {"type": "boolean", "const": True}},
        (),
        open_=False,
        description="each marker only where the matching config field is set",
    ),
    "RequestHeader": json_object(
        {"config": shape("RequestConfig"), "adapterDefaults": shape("AdapterDefaults")}, ("config",), open_=True
    ),
    "RequestHeaderData": json_object(
        {"header": shape("RequestHeader")}, ("header",), open_=True, description='data.reason is not "fallback"'
    ),
}

SHAPES: dict[str, Schema] = {**_MESSAGES, **_DATA}
