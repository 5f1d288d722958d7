"""Wire models of the answers and of the events, named for their role. They document the API (OpenAPI, generated
clients) and are never used to parse a request: bodies are checked by :mod:`app.api.requests`, so that events reach
the domain exactly as sent."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from app.api.problems import PROBLEMS
from app.domain.session import HEADER_FIELDS

__all__ = [
    "AppendResponse",
    "CreateMeta",
    "Event",
    "EventsPage",
    "Health",
    "History",
    "Lineage",
    "NewEvent",
    "Problem",
    "Ready",
    "SeedEvent",
    "SessionOut",
    "SessionPage",
    "SnapshotOut",
]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReplaceOp(_Wire):
    op: Literal["replace"]
    start: int = Field(ge=0)
    end: int = Field(ge=0)


# The object comes first: openapi-python-client (0.29) checks a ``const`` member of a union outside its try/except,
# so with "append" first its generated clients fail to parse any event that carries a replace.
SurfaceOp = ReplaceOp | Literal["append"]


class NewEvent(_Wire):
    """An event to append: the server assigns ``seq`` and ``time``."""

    type: str = Field(min_length=1, max_length=256, examples=["turn/start"])
    data: Any = Field(description="any JSON value; the key must be present", examples=[{"turn": 1}])
    ignorable: Literal[True] | None = None
    surfaceOp: SurfaceOp | None = Field(
        None, description="required on user/message, assistant/message and tool/result; forbidden elsewhere"
    )
    sourceEventSeqs: list[int] | None = None


class Event(_Wire):
    """A stored event."""

    type: str
    seq: int = Field(ge=0)
    time: int
    data: Any
    ignorable: Literal[True] | None = None
    surfaceOp: SurfaceOp | None = None
    sourceEventSeqs: list[int] | None = None


class SeedEvent(_Wire):
    """An event of a seed: ``seq`` (equal to its index) and ``time`` are optional."""

    type: str
    seq: int | None = Field(None, ge=0)
    time: int | None = None
    data: Any
    ignorable: Literal[True] | None = None
    surfaceOp: SurfaceOp | None = None
    sourceEventSeqs: list[int] | None = None


_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int}

# The create's meta: the header's fields (each optional, null meaning absent), plus createdAt (checked, ignored).
_META_FIELDS: dict[str, Any] = {
    field.key: (_JSON_TYPES[field.json_type] | None, Field(None, description=field.description))
    for field in HEADER_FIELDS
}
_META_FIELDS["createdAt"] = (int | None, Field(None, ge=0, description="checked, then ignored: the server assigns it"))
CreateMeta: type[BaseModel] = create_model("CreateMeta", __config__=ConfigDict(extra="forbid"), **_META_FIELDS)

# The Session resource (spec 3): every member present, an unset header field as null.
_SESSION_FIELDS: dict[str, Any] = {"id": (str, ...), "instance": (str, ...), "createdAt": (int, ...)}
for _field in HEADER_FIELDS:
    _type = int if _field.key == "delegationDepth" else _JSON_TYPES[_field.json_type] | None
    _SESSION_FIELDS[_field.key] = (_type, ...)
_SESSION_FIELDS.update(
    eventCount=(int, ...),
    lastEventType=(str | None, ...),
    openTurn=(int | None, ...),
    lastTurnEndSeq=(int | None, ...),
    forkable=(bool, ...),
)
SessionOut: type[BaseModel] = create_model("SessionOut", __doc__="The Session resource.", **_SESSION_FIELDS)


class SessionPage(BaseModel):
    items: list[SessionOut]
    nextCursor: str | None


class AppendResponse(BaseModel):
    events: list[Event]
    session: SessionOut


class EventsPage(BaseModel):
    events: list[Event]
    nextSeq: int
    eventCount: int


class Lineage(BaseModel):
    ancestors: list[SessionOut]
    children: list[SessionOut]
    missingAncestor: str | None


class History(BaseModel):
    messages: list[dict[str, Any]]
    eventCount: int


class SnapshotMeta(BaseModel):
    parentSession: str
    seedLength: int
    cwd: str | None = None


class SnapshotOut(BaseModel):
    source: SessionOut
    seed: list[Event]
    meta: SnapshotMeta


class Health(BaseModel):
    status: Literal["ok"]


class CorruptSession(BaseModel):
    id: str
    tenant: str
    path: str
    reason: str


class Ready(BaseModel):
    """The counts and the corrupt sessions only for an admin key (or with no keys file)."""

    status: Literal["ready"]
    sessions: int | None = None
    corrupt: list[CorruptSession] | None = None


class FieldError(BaseModel):
    field: str
    reason: str


class Problem(BaseModel):
    """An RFC 9457 problem with forklog's stable ``code`` and the facts a client needs."""

    type: str
    title: str
    status: int
    detail: str
    code: str = Field(json_schema_extra={"enum": [code.value for code in PROBLEMS]})
    instance: str
    index: int | None = None
    reason: str | None = None
    lastEventType: str | None = None
    openTurn: int | None = None
    lastTurnEndSeq: int | None = None
    currentSeq: int | None = None
    errors: list[FieldError] | None = None
