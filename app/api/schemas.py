"""Wire models of the answers, the events and the problems, named for their role. They document the API (OpenAPI,
generated clients) and are never used to parse a request: bodies are checked by :mod:`app.api.requests`, so that
events reach the domain exactly as sent.

The events of spec 1.2 are described as JSON Schema from one table, :data:`EVENT_TYPES`: one schema per core type
(its ``data`` shape), for each of the three roles an event plays (appended, stored, in a seed), joined in a ``oneOf``
on ``type`` with an open schema for every other type. The schemas say what the rules check of each shape and no
more (a member the rules leave open stays open), so a client built from them never refuses a stored event, and the
relational rules (turn numbers, open steps, unanswered calls) stay the server's. The answers are pydantic models,
whose members refer to those schemas by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema, create_model

from app.api.problems import PROBLEMS, ProblemSpec
from app.domain.errors import ErrorCode
from app.domain.event_shapes import MAX_TYPE_LENGTH, STORAGE_TAGS
from app.domain.jsonvalue import MAX_SAFE_INTEGER
from app.domain.session import HEADER_FIELDS

__all__ = [
    "EVENT_TYPES",
    "FACT_SCHEMAS",
    "AppendResponse",
    "EventRole",
    "EventType",
    "EventsPage",
    "Health",
    "History",
    "Lineage",
    "Ready",
    "SessionOut",
    "SessionPage",
    "SnapshotOut",
    "event_schemas",
    "field_error_schema",
    "message_schemas",
    "meta_schema",
    "problem_name",
    "problem_schema",
    "problem_schemas",
    "ref",
]

Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: Schema, required: tuple[str, ...], *, open_: bool, description: str = "") -> Schema:
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


def message_schemas() -> dict[str, Schema]:
    """``Message`` and its parts. The rules check a message's ``id``, ``role``, ``content`` (an array) and
    ``source.kind``; a content block is described as DSH writes one (an object with a ``type``), its other members
    open."""
    return {
        "ContentBlock": _object(
            {"type": {**TEXT, "description": 'the block\'s kind: "text", "tool-result", ...'}, "text": TEXT},
            ("type",),
            open_=True,
            description="one block of a message's content: a text block carries `text`, other kinds their own members",
        ),
        "MessageSource": _object(
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
        "Message": _object(
            {
                "id": NON_EMPTY_TEXT,
                "role": {**TEXT, "description": '"user" or "assistant"'},
                "content": {"type": "array", "items": ref("ContentBlock")},
                "source": ref("MessageSource"),
            },
            ("id", "role", "content", "source"),
            open_=True,
            description="a message of the model history, as user/message, assistant/message and tool/result carry it",
        ),
        "ReplaceOp": _object(
            {"op": {"type": "string", "const": "replace"}, "start": SEQ, "end": SEQ},
            ("op", "start", "end"),
            open_=False,
            description="replace the current surface nodes from seq start through seq end with this event's message",
        ),
        # openapi-python-client (0.29) checks a const member of a union outside its try/except: the object comes
        # first, or its clients fail to parse an event that carries a replace.
        "SurfaceOp": {
            "description": 'how a surface event changes the model history: "append", or a replace',
            "oneOf": [ref("ReplaceOp"), {"type": "string", "const": "append"}],
        },
    }


# -- events (spec 1.1, 1.2) ------------------------------------------------------------------------------------------


def _turn_step(**more: Schema) -> tuple[Schema, tuple[str, ...]]:
    return {"turn": NUMBER_FROM_ONE, "step": NUMBER_FROM_ONE, **more}, ("turn", "step", *more)


_TOOL_CALL, _TOOL_CALL_REQUIRED = _turn_step(callId=NON_EMPTY_TEXT, name=TEXT, arguments=TEXT)
_CHUNK, _CHUNK_REQUIRED = _turn_step(chunk={"type": "object", "additionalProperties": True})
_WITH_MESSAGE, _WITH_MESSAGE_REQUIRED = _turn_step(message=ref("Message"))
_STEP, _STEP_REQUIRED = _turn_step()

# The shapes of ``data`` that more than one type shares, or that have parts of their own.
DATA_SCHEMAS: dict[str, Schema] = {
    "TurnStartData": _object({"turn": NUMBER_FROM_ONE}, ("turn",), open_=True),
    "TurnEndReason": _object(
        {"kind": {**TEXT, "description": "completed, aborted, blocked, error, max-tokens, interrupted, or another"}},
        ("kind",),
        open_=True,
    ),
    "TurnEndData": _object({"turn": NUMBER_FROM_ONE, "reason": ref("TurnEndReason")}, ("turn", "reason"), open_=True),
    "StepData": _object(_STEP, _STEP_REQUIRED, open_=True),
    "AssistantChunkData": _object(_CHUNK, _CHUNK_REQUIRED, open_=True),
    "AssistantMessageData": _object(_WITH_MESSAGE, _WITH_MESSAGE_REQUIRED, open_=True),
    "ToolCallData": _object(_TOOL_CALL, _TOOL_CALL_REQUIRED, open_=True),
    "ToolResultData": _object(
        _WITH_MESSAGE,
        _WITH_MESSAGE_REQUIRED,
        open_=True,
        description="message.content is exactly one block {type: tool-result, toolCallId, content: [...]}",
    ),
    "RequestConfig": _object(
        {"provider": NON_EMPTY_TEXT, "model": NON_EMPTY_TEXT, "reasoningEffort": NON_EMPTY_TEXT},
        ("provider", "model"),
        open_=True,
    ),
    "AdapterDefaults": _object(
        {"reasoningEffort": {"type": "boolean", "const": True}, "maxTokens": {"type": "boolean", "const": True}},
        (),
        open_=False,
        description="each marker only where the matching config field is set",
    ),
    "RequestHeader": _object(
        {"config": ref("RequestConfig"), "adapterDefaults": ref("AdapterDefaults")}, ("config",), open_=True
    ),
    "RequestHeaderData": _object(
        {"header": ref("RequestHeader")}, ("header",), open_=True, description='data.reason is not "fallback"'
    ),
}


@dataclass(frozen=True, slots=True)
class EventType:
    """One type of the core vocabulary: its schemas' stem, its ``data`` schema, whether it is a surface event."""

    type: str
    stem: str
    data: Schema
    surface: bool = False
    description: str = ""


EVENT_TYPES: tuple[EventType, ...] = (
    EventType("turn/start", "TurnStart", ref("TurnStartData"), description="opens turn data.turn (1, 2, 3, ...)"),
    EventType("turn/end", "TurnEnd", ref("TurnEndData"), description="closes the open turn: a fork boundary"),
    EventType("step/start", "StepStart", ref("StepData"), description="opens step data.step of the open turn"),
    EventType("step/end", "StepEnd", ref("StepData"), description="closes the open step"),
    EventType("user/message", "UserMessage", ref("Message"), True, "a user's message (role user)"),
    EventType("assistant/chunk", "AssistantChunk", ref("AssistantChunkData"), description="a streamed piece"),
    EventType("assistant/message", "AssistantMessage", ref("AssistantMessageData"), True, "the model's message"),
    EventType("tool/call", "ToolCall", ref("ToolCallData"), description="a tool call of the open step"),
    EventType("tool/result", "ToolResult", ref("ToolResultData"), True, "a tool call's result (role user)"),
    EventType("request/header", "RequestHeader", ref("RequestHeaderData"), description="inside a turn"),
    EventType("todo/write", "TodoWrite", ANY_JSON, description="inside a turn; data is not checked"),
    EventType("request/context", "RequestContext", ANY_JSON, description="inside a turn; data is not checked"),
    EventType("session/end-seed", "SessionEndSeed", ANY_JSON, description="anywhere; data is not checked"),
)
# Types no event may have: the open schema for "any other type" leaves them out too.
_REFUSED_TYPES = ("request/header-delta", *sorted(STORAGE_TAGS))


@dataclass(frozen=True, slots=True)
class EventRole:
    """Where an event is: appended (no seq or time), stored (both), or in a seed (each optional)."""

    prefix: str
    union: str
    envelope: Schema
    required: tuple[str, ...]
    description: str


EVENT_ROLES: tuple[EventRole, ...] = (
    EventRole("New", "NewEvent", {}, (), "an event to append: the server assigns seq and time"),
    EventRole("", "Event", {"seq": SEQ, "time": TIME}, ("seq", "time"), "a stored event"),
    EventRole(
        "Seed",
        "SeedEvent",
        {"seq": {**SEQ, "description": "its index, when given"}, "time": TIME},
        (),
        "an event of a seed: seq (its index) and time are optional",
    ),
)


def _event(role: EventRole, kind: EventType) -> Schema:
    properties: Schema = {"type": {"type": "string", "const": kind.type}, **role.envelope, "data": kind.data}
    properties["ignorable"] = {"type": "boolean", "const": True}
    required = ("type", *role.required, "data")
    if kind.surface:
        seqs: Schema = {"type": "array", "items": SEQ, "uniqueItems": True}
        if kind.type != "assistant/message":
            seqs["minItems"] = 1
        properties["surfaceOp"] = ref("SurfaceOp")
        properties["sourceEventSeqs"] = {**seqs, "description": "earlier events this one was made from"}
        required = (*required, "surfaceOp")
    return _object(properties, required, open_=False, description=kind.description)


def _other_event(role: EventRole) -> Schema:
    known = [kind.type for kind in EVENT_TYPES] + list(_REFUSED_TYPES)
    type_schema: Schema = {"type": "string", "minLength": 1, "maxLength": MAX_TYPE_LENGTH, "not": {"enum": known}}
    properties: Schema = {"type": type_schema, **role.envelope, "data": ANY_JSON}
    properties["ignorable"] = {"type": "boolean", "const": True}
    return _object(
        properties,
        ("type", *role.required, "data"),
        open_=False,
        description="an event of any other type (a log-only event): its data is not checked",
    )


def event_schemas() -> dict[str, Schema]:
    """Every event schema: the data shapes, then per role one schema per core type, the open one and their union."""
    schemas: dict[str, Schema] = dict(DATA_SCHEMAS)
    for role in EVENT_ROLES:
        members = []
        for kind in EVENT_TYPES:
            name = f"{role.prefix}{kind.stem}Event"
            schemas[name] = _event(role, kind)
            members.append(ref(name))
        other = f"{role.prefix}OtherEvent"
        schemas[other] = _other_event(role)
        members.append(ref(other))
        schemas[role.union] = {"description": role.description, "oneOf": members}
    return schemas


# -- the create's meta (spec 2.1) ------------------------------------------------------------------------------------

# What the rules of each header field (app.domain.session.HEADER_FIELDS) say of a meta value, as JSON Schema.
_META_RULES: dict[str, Schema] = {
    "cwd": {"pattern": "^/"},
    "parentSession": {"minLength": 1},
    "seedLength": {"minimum": 0, "maximum": MAX_SAFE_INTEGER},
    "origin": {"enum": ["subagent", None]},
    "delegationDepth": {"minimum": 0, "maximum": MAX_SAFE_INTEGER},
    "agentPreset": {},
}


def meta_schema() -> Schema:
    """``CreateMeta``: the header's fields, each optional (null meaning absent), and ``createdAt``."""
    properties: Schema = {
        field.key: {"type": [field.json_type, "null"], **_META_RULES[field.key], "description": field.description}
        for field in HEADER_FIELDS
    }
    properties["createdAt"] = {
        "type": ["integer", "null"],
        "minimum": 0,
        "maximum": MAX_SAFE_INTEGER,
        "description": "checked, then ignored: the server assigns it",
    }
    return _object(properties, (), open_=False, description="the new session's header fields; null means absent")


# -- problems (spec 3, "Errors") -------------------------------------------------------------------------------------

# The facts a problem can carry (app.api.problems.PROBLEMS says which code carries which).
FACT_SCHEMAS: dict[str, Schema] = {
    "index": {**SEQ, "description": "the index of the refused event in the request's array"},
    "reason": {**TEXT, "description": "what is wrong, for a person"},
    "lastEventType": {**TEXT, "description": "the type of the session's last event"},
    "openTurn": {**NUMBER_FROM_ONE, "type": ["integer", "null"], "description": "the open turn, null if none"},
    "lastTurnEndSeq": {**SEQ, "type": ["integer", "null"], "description": "the seq of the last turn/end, or null"},
    "currentSeq": {**SEQ, "description": "the log's length now"},
    "errors": {"type": "array", "items": ref("FieldError"), "minItems": 1},
    "quota": {"type": "string", "enum": ["sessions", "bytes"], "description": "which of the tenant's quotas"},
    "limit": {"type": "integer", "minimum": 0, "description": "the quota: live sessions, or bytes of logs"},
    "used": {"type": "integer", "minimum": 0, "description": "what the tenant holds now, in the quota's unit"},
    "retryAfterMs": {"type": "integer", "minimum": 1, "description": "milliseconds until the key may ask again"},
}


def problem_name(code: ErrorCode) -> str:
    return "".join(part.capitalize() for part in code.value.split("_")) + "Problem"


def problem_schema(code: ErrorCode, spec: ProblemSpec) -> Schema:
    """One code's problem body: the RFC 9457 members, ``code`` fixed, the facts it always carries required and
    those it carries only when they apply optional; nothing else."""
    facts = {name: FACT_SCHEMAS[name] for name in (*spec.facts, *spec.optional)}
    properties: Schema = {
        "type": {**TEXT, "description": "a URI naming the code"},
        "title": TEXT,
        "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {**TEXT, "description": "what happened and what to do next, for a person"},
        "code": {"type": "string", "const": code.value},
        "instance": {**TEXT, "description": "the request's path"},
        "requestId": {**TEXT, "description": "the request's id, as its X-Request-Id answer header gives it"},
        **facts,
    }
    required = ("type", "title", "status", "detail", "code", "instance", "requestId", *spec.facts)
    return _object(properties, required, open_=False, description=f"{code.value}: {spec.title}")


def problem_schemas() -> dict[str, Schema]:
    """One schema per code, by name."""
    return {problem_name(code): problem_schema(code, spec) for code, spec in PROBLEMS.items()}


def field_error_schema() -> Schema:
    """A member of INVALID_REQUEST's ``errors``: what is wrong, and where."""
    return _object(
        {
            "field": {**TEXT, "description": 'the dotted body path, the parameter or header name, "id", or ""'},
            "reason": TEXT,
        },
        ("field", "reason"),
        open_=False,
    )


# -- answers ---------------------------------------------------------------------------------------------------------

# A member whose schema is one of the above, by name.
StoredEvent = Annotated[dict[str, Any], WithJsonSchema(ref("Event"))]
MessageOut = Annotated[dict[str, Any], WithJsonSchema(ref("Message"))]
Count = Annotated[int, WithJsonSchema(SEQ)]
TurnNumber = Annotated[int, WithJsonSchema(NUMBER_FROM_ONE)]

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int}

# The Session resource (spec 3): every member present, an unset header field as null.
_SESSION_FIELDS: dict[str, Any] = {"id": (str, ...), "instance": (str, ...), "createdAt": (int, ...)}
for _field in HEADER_FIELDS:
    _type = Count if _field.key == "delegationDepth" else _JSON_TYPES[_field.json_type] | None
    _SESSION_FIELDS[_field.key] = (_type, Field(..., description=_field.description))
_SESSION_FIELDS.update(
    eventCount=(Count, Field(..., description="the log's length: the seq of the next event")),
    lastEventType=(str | None, ...),
    openTurn=(TurnNumber | None, Field(..., description="the open turn's number, or null")),
    lastTurnEndSeq=(Count | None, Field(..., description="the seq of the last turn/end, or null")),
    forkable=(bool, Field(..., description="whether a fork without atSeq would pass the boundary rule now")),
    updatedAt=(int, Field(..., description="the later of createdAt and the time of the last event (epoch ms)")),
    title=(str | None, Field(..., description="data.title of the last session/title event, or null")),
    preview=(
        str | None,
        Field(
            ...,
            description="the first user/message's text (its text blocks joined by a space, whitespace runs made one "
            "space, trimmed, at most 200 characters), or null",
        ),
    ),
    bytes=(Count, Field(..., description="the length in bytes of the session's log as export writes it")),
)
SessionOut: type[BaseModel] = create_model("SessionOut", __doc__="The Session resource.", **_SESSION_FIELDS)


class SearchMatch(BaseModel):
    """Where a search matched a session: the seq of the first user or assistant message holding the query's first
    word (the title's session/title event when only the title holds it; null when only the cwd does), and at most
    200 characters of that text around the word."""

    seq: Count | None
    snippet: str = Field(max_length=200)


SessionListItem: type[BaseModel] = create_model(
    "SessionListItem",
    __base__=SessionOut,
    __doc__="A Session in a list; in a search (q), with where it matched.",
    match=(SearchMatch | None, Field(default=None, description="present in the answer to a search (q) only")),
)


class SessionPage(BaseModel):
    """A page of sessions in the order asked for (creation order by default)."""

    items: list[SessionListItem]
    nextCursor: str | None = Field(description="the cursor of the next page; null on the last page")


class AppendResponse(BaseModel):
    """The appended events as stored, and the session after them."""

    events: list[StoredEvent]
    session: SessionOut


class EventsPage(BaseModel):
    """Events of a session's log from a seq on."""

    events: list[StoredEvent]
    nextSeq: Count = Field(description="from + the number of events: where the next page starts")
    eventCount: Count


class Lineage(BaseModel):
    """A session's ancestors (parent first, while each is live) and its children."""

    ancestors: list[SessionOut]
    children: list[SessionOut]
    missingAncestor: str | None = Field(description="the first parentSession on the chain that is not live, or null")


class History(BaseModel):
    """The model history: the fold of the surface events (spec 1.3)."""

    messages: list[MessageOut]
    eventCount: Count


class SnapshotMeta(BaseModel):
    """The child's lineage: its parent, its seed's length and the parent's cwd (only if it has one)."""

    parentSession: str = Field(min_length=1)
    seedLength: Count
    cwd: Annotated[str | None, WithJsonSchema(TEXT)] = Field(
        default=None, description="absent when the source has none"
    )


class SnapshotOut(BaseModel):
    """What a fork would take: the source as it is, the seed and the child's meta (posted as is, it creates it)."""

    source: SessionOut
    seed: list[StoredEvent]
    meta: SnapshotMeta


class Health(BaseModel):
    status: Literal["ok"]


class CorruptSession(BaseModel):
    """A stored session kept out of service."""

    id: str
    tenant: str
    path: str
    reason: str


class Ready(BaseModel):
    """Every tenant's counts and corrupt list to an admin key; its tenant's counts to another key; no key: status."""

    status: Literal["ready"]
    sessions: Count | None = Field(
        default=None, description="live sessions: of every tenant for an admin key, else of the key's tenant"
    )
    corrupt: list[CorruptSession] | Count | None = Field(
        default=None,
        description="the sessions kept out of service: every tenant's, listed, for an admin key; "
        "for another key, how many of its tenant's",
    )
