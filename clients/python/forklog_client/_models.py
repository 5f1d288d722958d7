"""The answers, as objects with snake_case attributes over the wire's camelCase members.

A model keeps the whole JSON object it was made from: members this version does not know stay readable as
``model["wireName"]``, as a snake_case attribute at run time (``session.some_new_member``), and in ``to_dict()``,
which gives back the wire's object (what ``create(seed=..., meta=...)`` takes again).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

__all__ = [
    "CORE_EVENT_TYPES",
    "Appended",
    "Event",
    "History",
    "Lineage",
    "Message",
    "Model",
    "Session",
    "SessionStats",
    "Snapshot",
]

T = TypeVar("T")
M = TypeVar("M", bound="Model")

_UPPER = re.compile(r"_([a-z0-9])")


def _camel(name: str) -> str:
    return _UPPER.sub(lambda found: found.group(1).upper(), name)


class Model:
    """A JSON object from the server; equal to another when their objects are equal."""

    __slots__ = ("_wire",)

    def __init__(self, wire: Mapping[str, Any]) -> None:
        self._wire: dict[str, Any] = dict(wire)

    def to_dict(self) -> dict[str, Any]:
        """The object as the server sent it (a shallow copy)."""
        return dict(self._wire)

    def __getitem__(self, member: str) -> Any:
        return self._wire[member]

    def __contains__(self, member: object) -> bool:
        return member in self._wire

    def get(self, member: str, default: Any = None) -> Any:
        return self._wire.get(member, default)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and isinstance(other, Model) and other._wire == self._wire

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._wire!r})"

    if not TYPE_CHECKING:
        # Members a newer server sends, by their snake_case name; type checkers see only the declared ones.
        def __getattr__(self, name: str) -> Any:
            wire = object.__getattribute__(self, "_wire")
            for member in (_camel(name), name):
                if member in wire:
                    return wire[member]
            raise AttributeError(f"{type(self).__name__} has no member {name!r}")


class Member(Generic[T]):
    """A wire member read as an attribute (``None`` when absent)."""

    def __init__(self, wire: str) -> None:
        self.wire = wire

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Member[T]: ...
    @overload
    def __get__(self, obj: Model, owner: type[Any]) -> T: ...
    def __get__(self, obj: Model | None, owner: type[Any]) -> Member[T] | T:
        if obj is None:
            return self
        return cast(T, obj._wire.get(self.wire))


class Nested(Generic[M]):
    """A wire member that is an object, read as a model."""

    def __init__(self, wire: str, model: type[M]) -> None:
        self.wire, self.model = wire, model

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Nested[M]: ...
    @overload
    def __get__(self, obj: Model, owner: type[Any]) -> M: ...
    def __get__(self, obj: Model | None, owner: type[Any]) -> Nested[M] | M:
        if obj is None:
            return self
        return self.model(obj._wire[self.wire])


class NestedList(Generic[M]):
    """A wire member that is an array of objects, read as a list of models."""

    def __init__(self, wire: str, model: type[M]) -> None:
        self.wire, self.model = wire, model

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> NestedList[M]: ...
    @overload
    def __get__(self, obj: Model, owner: type[Any]) -> builtins.list[M]: ...
    def __get__(self, obj: Model | None, owner: type[Any]) -> NestedList[M] | builtins.list[M]:
        if obj is None:
            return self
        return [self.model(item) for item in obj._wire.get(self.wire) or ()]


class MaybeNested(Generic[M]):
    """A wire member that is an object, read as a model; ``None`` when absent (an older server's answer)."""

    def __init__(self, wire: str, model: type[M]) -> None:
        self.wire, self.model = wire, model

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> MaybeNested[M]: ...
    @overload
    def __get__(self, obj: Model, owner: type[Any]) -> M | None: ...
    def __get__(self, obj: Model | None, owner: type[Any]) -> MaybeNested[M] | M | None:
        if obj is None:
            return self
        value = obj._wire.get(self.wire)
        return None if value is None else self.model(value)


class SessionStats(Model):
    """DSH's ``sessionStats`` fold of a session's whole log (spec 17): counts, and wall times in milliseconds."""

    __slots__ = ()
    turns: Member[int] = Member("turns")
    steps: Member[int] = Member("steps")
    llm_ms: Member[float] = Member("llmMs")
    tool_ms: Member[float] = Member("toolMs")
    ttft_ms: Member[float] = Member("ttftMs")
    ttft_steps: Member[int] = Member("ttftSteps")
    decode_ms: Member[float] = Member("decodeMs")
    decode_tokens: Member[float] = Member("decodeTokens")


class Session(Model):
    """A session (spec 3): its header, where its log stands, and (on newer servers) what a sidebar shows."""

    __slots__ = ()
    id: Member[str] = Member("id")
    instance: Member[str] = Member("instance")
    created_at: Member[int] = Member("createdAt")
    cwd: Member[str | None] = Member("cwd")
    parent_session: Member[str | None] = Member("parentSession")
    seed_length: Member[int | None] = Member("seedLength")
    origin: Member[str | None] = Member("origin")
    delegation_depth: Member[int] = Member("delegationDepth")
    agent_preset: Member[str | None] = Member("agentPreset")
    # Spec 17's members: None from a server that does not send them yet.
    archived: Member[bool | None] = Member("archived")
    stats: MaybeNested[SessionStats] = MaybeNested("stats", SessionStats)
    usage: Member[dict[str, int] | None] = Member("usage")
    own_usage: Member[dict[str, int] | None] = Member("ownUsage")
    event_count: Member[int] = Member("eventCount")
    last_event_type: Member[str | None] = Member("lastEventType")
    open_turn: Member[int | None] = Member("openTurn")
    last_turn_end_seq: Member[int | None] = Member("lastTurnEndSeq")
    forkable: Member[bool] = Member("forkable")
    # Spec 12's members: None from a server that does not send them yet.
    updated_at: Member[int | None] = Member("updatedAt")
    title: Member[str | None] = Member("title")
    preview: Member[str | None] = Member("preview")
    bytes: Member[int | None] = Member("bytes")
    match: Member[dict[str, Any] | None] = Member("match")


# The types of the core vocabulary (spec 1.2), as the OpenAPI document's CoreEvent maps them; an event of any other
# type is a log-only event whose data the server does not check.
CORE_EVENT_TYPES = frozenset(
    {
        "turn/start",
        "turn/end",
        "step/start",
        "step/end",
        "user/message",
        "assistant/chunk",
        "assistant/message",
        "tool/call",
        "tool/result",
        "request/header",
        "todo/write",
        "request/context",
        "session/end-seed",
    }
)


class Event(Model):
    """A stored event: ``seq``, ``time``, ``type``, ``data`` and the surface members when present."""

    __slots__ = ()

    @property
    def is_core(self) -> builtins.bool:
        """Whether its type is of the core vocabulary (its data then has that type's shape)."""
        return self._wire.get("type") in CORE_EVENT_TYPES

    seq: Member[int] = Member("seq")
    time: Member[int] = Member("time")
    type: Member[str] = Member("type")
    data: Member[Any] = Member("data")
    ignorable: Member[bool | None] = Member("ignorable")
    surface_op: Member[str | dict[str, Any] | None] = Member("surfaceOp")
    source_event_seqs: Member[builtins.list[int] | None] = Member("sourceEventSeqs")


class Message(Model):
    """A message of the model history."""

    __slots__ = ()
    id: Member[str] = Member("id")
    role: Member[str] = Member("role")
    content: Member[builtins.list[dict[str, Any]]] = Member("content")
    source: Member[dict[str, Any]] = Member("source")


class Appended(Model):
    """An append's answer: the events as stored (with their seq and time) and the session after them."""

    __slots__ = ()
    events: NestedList[Event] = NestedList("events", Event)
    session: Nested[Session] = Nested("session", Session)


class History(Model):
    """The model history of a log (or of its prefix up to a ``turn/end``)."""

    __slots__ = ()
    messages: NestedList[Message] = NestedList("messages", Message)
    event_count: Member[int] = Member("eventCount")


class Snapshot(Model):
    """What a fork would take: the source, the seed and the child's meta (``create(seed=..., meta=...)`` takes
    them as they are)."""

    __slots__ = ()
    source: Nested[Session] = Nested("source", Session)
    seed: NestedList[Event] = NestedList("seed", Event)
    meta: Member[dict[str, Any]] = Member("meta")


class Lineage(Model):
    """A session's live ancestors (parent first), its live children, and the first ancestor that is gone."""

    __slots__ = ()
    ancestors: NestedList[Session] = NestedList("ancestors", Session)
    children: NestedList[Session] = NestedList("children", Session)
    missing_ancestor: Member[str | None] = Member("missingAncestor")
