"""Wire models of the answers, the events and the problems, named for their role. They document the API (OpenAPI,
generated clients) and are never used to parse a request: bodies are checked by :mod:`app.api.wire.requests`, so that
events reach the domain exactly as sent.

The events are published from the domain's one vocabulary (:data:`app.domain.event_shapes.CORE_TYPES` and the shapes
of :mod:`app.domain.shape_schemas`): for each of the three roles an event plays (appended, stored, in a seed), one
schema per core type, joined in a ``CoreEvent`` ``oneOf`` discriminated on ``type`` (every member mapped), and the
role's union, ``oneOf`` that and an open ``OtherEvent`` whose ``type`` is any other string. The open schema stays out
of the discriminated union: a discriminator maps a value to a schema, so an unmapped member would be read as the
value of its own name (OpenAPI 3.1's implicit mapping, which generators follow), and no mapping can name "any other
string". The two members of the outer union exclude each other by ``type`` (``not`` ``enum``). The answers are
pydantic models, whose members refer to those schemas by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, WithJsonSchema, create_model

from app.api.wire.problems import PROBLEMS, ProblemSpec
from app.domain.errors import ErrorCode
from app.domain.event_shapes import CORE_TYPES, MAX_TYPE_LENGTH, REFUSED_TYPES, CoreType
from app.domain.jsonvalue import MAX_SAFE_INTEGER
from app.domain.session import HEADER_FIELDS
from app.domain.shape_schemas import ANY_JSON, NUMBER_FROM_ONE, SEQ, SHAPE_ROOT, SHAPES, TEXT, TIME, Schema
from app.domain.shape_schemas import json_object as _object

__all__ = [
    "FACT_SCHEMAS",
    "AppendResponse",
    "EventRole",
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
    "meta_schema",
    "problem_name",
    "problem_schema",
    "problem_schemas",
    "ref",
]

COMPONENTS = "#/components/schemas/"


def ref(name: str) -> Schema:
    return {"$ref": f"{COMPONENTS}{name}"}


def _published(node: Any) -> Any:
    """A domain shape as the document holds it: its references to other shapes point into the components."""
    if isinstance(node, list):
        return [_published(item) for item in node]
    if not isinstance(node, dict):
        return node
    target = node.get("$ref")
    if isinstance(target, str) and target.startswith(SHAPE_ROOT):
        return ref(target.removeprefix(SHAPE_ROOT))
    return {key: _published(value) for key, value in node.items()}


# -- events (spec 1.1, 1.2) ------------------------------------------------------------------------------------------


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


def _event(role: EventRole, kind: CoreType) -> Schema:
    data = _published(kind.data)
    properties: Schema = {"type": {"type": "string", "const": kind.type}, **role.envelope, "data": data}
    properties["ignorable"] = {"type": "boolean", "const": True}
    required = ("type", *role.required, "data")
    if kind.surface:
        # No uniqueItems: openapi-generator's typescript-fetch types such an array as a Set, which its client sends
        # as {} (JSON.stringify of a Set) once the runtime checks that nested event unions defeat are off. The
        # server refuses a repeated seq all the same, as the description says.
        seqs: Schema = {"type": "array", "items": SEQ}
        if not kind.empty_sources:
            seqs["minItems"] = 1
        properties["surfaceOp"] = ref("SurfaceOp")
        properties["sourceEventSeqs"] = {
            **seqs,
            "description": "the distinct seqs of earlier events this one was made from (a repeated seq is refused)",
        }
        required = (*required, "surfaceOp")
    return _object(properties, required, open_=False, description=kind.description)


def _other_event(role: EventRole) -> Schema:
    known = [kind.type for kind in CORE_TYPES] + sorted(REFUSED_TYPES)
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
    """Every event schema: the vocabulary's shapes, then per role one schema per core type, their discriminated
    union, the open schema and the role's union of those two."""
    schemas: dict[str, Schema] = {name: _published(schema) for name, schema in SHAPES.items()}
    for role in EVENT_ROLES:
        mapping: dict[str, str] = {}
        for kind in CORE_TYPES:
            name = f"{role.prefix}{kind.stem}Event"
            schemas[name] = _event(role, kind)
            mapping[kind.type] = ref(name)["$ref"]
        core, other = f"{role.prefix}CoreEvent", f"{role.prefix}OtherEvent"
        schemas[core] = {
            "description": f"{role.description}; its type is one of the core vocabulary's, its data that type's shape",
            "oneOf": [{"$ref": target} for target in mapping.values()],
            "discriminator": {"propertyName": "type", "mapping": mapping},
        }
        schemas[other] = _other_event(role)
        schemas[role.union] = {"description": role.description, "oneOf": [ref(core), ref(other)]}
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

# The facts a problem can carry (app.api.wire.problems.PROBLEMS says which code carries which).
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


class SessionStats(BaseModel):
    """DSH's sessionStats fold of the whole log (spec 17): counts, and wall times in milliseconds."""

    turns: Count = Field(description="turns with at least one step/end")
    steps: Count = Field(description="step/end events")
    llmMs: float = Field(ge=0, description="model time: each step's step/start to its assistant/message")
    toolMs: float = Field(ge=0, description="tool time: each tool/call to the tool/result of its callId")
    ttftMs: float = Field(ge=0, description="time to first token, summed over the steps that streamed one")
    ttftSteps: Count = Field(description="the steps whose first token was seen")
    decodeMs: float = Field(ge=0, description="first token to assistant/message, on steps that report outputTokens")
    decodeTokens: float = Field(ge=0, description="the outputTokens of those steps")


TokenSums = Annotated[
    dict[str, int],
    WithJsonSchema(
        {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "description": "per member (inputTokens, outputTokens, cacheReadTokens, reasoningTokens, any other), "
            "the sum of its integer values over the usage chunks",
        }
    ),
]

# The Session resource (spec 3): every member present, an unset header field as null.
_SESSION_FIELDS: dict[str, Any] = {"id": (str, ...), "instance": (str, ...), "createdAt": (int, ...)}
for _field in HEADER_FIELDS:
    _type = Count if _field.key == "delegationDepth" else _JSON_TYPES[_field.json_type] | None
    _SESSION_FIELDS[_field.key] = (_type, Field(..., description=_field.description))
_SESSION_FIELDS["archived"] = (
    bool,
    Field(..., description="whether the session is archived: hidden from lists and searches unless asked for"),
)
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
    stats=(SessionStats, Field(..., description="DSH's sessionStats fold of the whole log")),
    usage=(TokenSums, Field(..., description="token sums over every usage chunk of the log")),
    ownUsage=(
        TokenSums,
        Field(..., description="token sums over the usage chunks after the seed (seedLength) only"),
    ),
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
