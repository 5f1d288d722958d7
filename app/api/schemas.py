"""Wire models, named for their role. They document the API (OpenAPI, generated clients); request bodies are
checked by hand in :mod:`app.api.body` so that events reach the domain exactly as sent."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.problems import PROBLEMS


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


class CreateMeta(_Wire):
    cwd: str | None = Field(None, description="an absolute path")
    parentSession: str | None = None
    seedLength: int | None = Field(None, ge=0)
    origin: Literal["subagent"] | None = None
    delegationDepth: int | None = Field(None, ge=0)
    agentPreset: str | None = None
    createdAt: int | None = Field(None, ge=0, description="checked, then ignored: the server assigns createdAt")


class SessionCreate(_Wire):
    """``POST /sessions``: all members optional; a snapshot response posted as is creates the fork's child."""

    id: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    seed: list[SeedEvent] | None = None
    meta: CreateMeta | None = None
    source: Any = Field(None, description="ignored (so that a snapshot response can be posted as is)")


class AppendRequest(_Wire):
    events: list[NewEvent] = Field(min_length=1, max_length=1000)
    expectedSeq: int | None = Field(None, description="the log length the client has seen")
    instance: str | None = Field(None, description="the session incarnation the client has seen")


class SnapshotRequest(_Wire):
    instance: str | None = None
    atSeq: int | None = Field(None, description="the seq of a turn/end; omitted: the whole log")
    expectedSeq: int | None = None


class ForkRequest(SnapshotRequest):
    sessionId: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class SessionOut(BaseModel):
    """The Session resource."""

    id: str
    instance: str
    createdAt: int
    cwd: str | None
    parentSession: str | None
    seedLength: int | None
    origin: str | None
    delegationDepth: int
    agentPreset: str | None
    eventCount: int
    lastEventType: str | None
    openTurn: int | None
    lastTurnEndSeq: int | None
    forkable: bool


class SessionPage(BaseModel):
    items: list[SessionOut]
    nextCursor: str | None


class AppendResult(BaseModel):
    events: list[Event]
    session: SessionOut


class EventsPage(BaseModel):
    events: list[Event]
    nextSeq: int
    eventCount: int


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
    path: str
    reason: str


class Ready(BaseModel):
    status: Literal["ready"]
    sessions: int
    corrupt: list[CorruptSession]


class FieldError(BaseModel):
    field: str
    reason: str


class Problem(BaseModel):
    """An RFC 9457 problem with forklog's stable ``code`` and the facts a client needs."""

    type: str
    title: str
    status: int
    detail: str
    code: str = Field(json_schema_extra={"enum": list(PROBLEMS)})
    instance: str
    index: int | None = None
    reason: str | None = None
    lastEventType: str | None = None
    openTurn: int | None = None
    lastTurnEndSeq: int | None = None
    currentSeq: int | None = None
    errors: list[FieldError] | None = None


REQUEST_MODELS: tuple[type[BaseModel], ...] = (SessionCreate, AppendRequest, SnapshotRequest, ForkRequest)
