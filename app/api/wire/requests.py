"""One description per request: its body members, its query parameters, their kinds and limits.

The same description checks a request (members by hand, not by a model, so that an event reaches the domain exactly
as the client wrote it: a model would coerce ``1.0``, ``"1"`` and ``true``) and writes its part of the OpenAPI
document, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from app.api.wire.body import JsonBody
from app.api.wire.problems import RequestProblem, invalid_request
from app.domain.errors import ErrorCode
from app.domain.ids import ID_PATTERN, check_id
from app.domain.jsonvalue import MAX_SAFE_INTEGER, is_number, is_safe_integer
from app.domain.session import META_KEYS

__all__ = [
    "APPEND",
    "CREATE",
    "FORK",
    "FORK_BOUNDARIES",
    "HISTORY_QUERY",
    "INTERRUPT",
    "LIST_QUERY",
    "MAX_APPEND_EVENTS",
    "READ_QUERY",
    "SNAPSHOT",
    "STREAM_QUERY",
    "UPDATE",
    "BodyShape",
    "Kind",
    "Member",
    "QueryShape",
    "last_event_id",
]

MAX_APPEND_EVENTS = 1000
ID_REGEX = f"^{ID_PATTERN.pattern}$"


class Kind(Enum):
    ID = "id"  # a string that follows the id rule
    STRING = "string"
    INTEGER = "integer"  # a number with an integral value: 3 and 3.0 alike
    EVENTS = "events"  # an array of events to append
    SEED = "seed"  # an array of seed events
    META = "meta"  # a create's meta: an object of the header's fields
    IGNORED = "ignored"  # accepted and ignored (a snapshot's source, posted back to create)
    BOOLEAN = "boolean"  # true or false, nothing else (not 1, not "true")


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    kind: Kind
    description: str
    required: bool = False
    minimum: int | None = None
    maximum: int | None = None

    def check(self, value: Any) -> Any:
        """The member's value, checked (None when absent or null)."""
        if value is None:
            if self.required:
                raise self._refuse()
            return None
        kind = self.kind
        if kind is Kind.STRING or kind is Kind.ID:
            if not isinstance(value, str):
                raise invalid_request(self.name, "must be a string")
            return check_id(value, self.name) if kind is Kind.ID else value
        if kind is Kind.BOOLEAN:
            if not isinstance(value, bool):
                raise invalid_request(self.name, "must be true or false")
            return value
        if kind is Kind.INTEGER:
            if not is_number(value) or not float(value).is_integer():
                raise invalid_request(self.name, "must be an integer")
            return int(value)
        if kind is Kind.EVENTS or kind is Kind.SEED:
            if not isinstance(value, list) or not self._counts(len(value)):
                raise self._refuse()
            return value
        if kind is Kind.META:
            if not isinstance(value, dict):
                raise invalid_request(self.name, "must be an object")
            unknown = sorted(key for key in value if key not in META_KEYS)
            if unknown:
                raise RequestProblem(
                    ErrorCode.INVALID_REQUEST,
                    f"meta accepts only {', '.join(sorted(META_KEYS))}",
                    errors=[{"field": f"meta.{key}", "reason": "unknown member"} for key in unknown],
                )
            return value
        return None

    def _counts(self, length: int) -> bool:
        return (self.minimum is None or length >= self.minimum) and (self.maximum is None or length <= self.maximum)

    def _refuse(self) -> RequestProblem:
        if self.kind is Kind.EVENTS:
            return invalid_request(self.name, f"must be an array of {self.minimum} to {self.maximum} events")
        if self.kind is Kind.SEED:
            return invalid_request(self.name, "must be an array of events")
        return invalid_request(self.name, "is required")

    def json_schema(self) -> dict[str, Any]:
        schema: dict[str, Any]
        if self.kind is Kind.ID:
            schema = {"type": "string", "pattern": ID_REGEX, "minLength": 1, "maxLength": 128}
        elif self.kind is Kind.STRING:
            schema = {"type": "string"}
        elif self.kind is Kind.INTEGER:
            schema = {"type": "integer"}
            if self.minimum is not None:
                schema["minimum"] = self.minimum
            schema["maximum"] = MAX_SAFE_INTEGER if self.maximum is None else self.maximum
        elif self.kind in (Kind.EVENTS, Kind.SEED):
            item = "NewEvent" if self.kind is Kind.EVENTS else "SeedEvent"
            schema = {"type": "array", "items": {"$ref": f"#/components/schemas/{item}"}}
            if self.minimum is not None:
                schema["minItems"] = self.minimum
            if self.maximum is not None:
                schema["maxItems"] = self.maximum
        elif self.kind is Kind.META:
            schema = {"$ref": "#/components/schemas/CreateMeta"}
        elif self.kind is Kind.BOOLEAN:
            schema = {"type": "boolean"}
        else:
            schema = {}
        return {**schema, "description": self.description}


def _nullable_unless_required(member: Member) -> dict[str, Any]:
    """An optional member may also be sent as null (it then counts as absent)."""
    schema = member.json_schema()
    if member.required or member.kind is Kind.IGNORED:
        return schema
    if isinstance(schema.get("type"), str):
        return {**schema, "type": [schema["type"], "null"]}
    description = schema.pop("description")
    return {"anyOf": [schema, {"type": "null"}], "description": description}


@dataclass(frozen=True, slots=True)
class BodyShape:
    """A JSON object body. ``element_member``, when set, is the array member whose events may hold a lossless break
    (answered as INVALID_EVENT/INVALID_SEED with the event's index); a break anywhere else is INVALID_REQUEST."""

    name: str
    description: str
    members: tuple[Member, ...]
    element_member: str | None = None
    empty_is_object: bool = True
    allowed: frozenset[str] = field(init=False, repr=False, compare=False)  # the members' names

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed", frozenset(member.name for member in self.members))

    def parse(self, body: JsonBody) -> dict[str, Any]:
        """Every member by name, checked in the declared order (a member absent or null is None)."""
        allowed = self.allowed
        if not body.members.keys() <= allowed:
            unknown = sorted(key for key in body.members if key not in allowed)
            raise RequestProblem(
                ErrorCode.INVALID_REQUEST,
                f"unknown body member {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}",
                errors=[{"field": key, "reason": "unknown member"} for key in unknown],
            )
        body.refuse_breaks_outside(self.element_member)
        return {member.name: member.check(body.members.get(member.name)) for member in self.members}

    def json_schema(self) -> dict[str, Any]:
        return {
            "title": self.name,
            "description": self.description,
            "type": "object",
            "properties": {member.name: _nullable_unless_required(member) for member in self.members},
            "required": [member.name for member in self.members if member.required],
            "additionalProperties": False,
        }


@dataclass(frozen=True, slots=True)
class QueryParameter:
    name: str
    kind: Kind
    description: str
    default: int | None = None
    minimum: int | None = None  # for a string: its length
    maximum: int | None = None
    choices: tuple[str, ...] = ()  # for a string: the values it may take (none: any)

    def check(self, raw: str | None) -> Any:
        if self.kind is Kind.ID:
            return None if raw is None else check_id(raw, self.name)
        if self.kind is Kind.STRING:
            if raw is not None and self.choices and raw not in self.choices:
                raise invalid_request(self.name, f"must be one of {', '.join(self.choices)}")
            low, high = self.minimum, self.maximum
            if raw is not None and low is not None and high is not None and not low <= len(raw) <= high:
                raise invalid_request(self.name, f"must be {low} to {high} characters long")
            return raw
        value = _query_integer(raw, self.name, default=self.default)
        low, high = self.minimum, self.maximum
        if value is not None and low is not None and high is not None and not low <= value <= high:
            raise invalid_request(self.name, f"must be an integer from {low} to {high}")
        return value

    def openapi(self) -> dict[str, Any]:
        schema: dict[str, Any]
        if self.kind is Kind.INTEGER:
            schema = {"type": "integer"}
            if self.minimum is not None:
                schema["minimum"] = self.minimum
            schema["maximum"] = MAX_SAFE_INTEGER if self.maximum is None else self.maximum
            if self.default is not None:
                schema["default"] = self.default
        elif self.kind is Kind.ID:
            schema = {"type": "string", "pattern": ID_REGEX}
        elif self.choices:
            schema = {"type": "string", "enum": list(self.choices)}
        else:
            schema = {"type": "string"}
            if self.minimum is not None:
                schema["minLength"] = self.minimum
            if self.maximum is not None:
                schema["maxLength"] = self.maximum
        return {"name": self.name, "in": "query", "required": False, "description": self.description, "schema": schema}


@dataclass(frozen=True, slots=True)
class QueryShape:
    parameters: tuple[QueryParameter, ...]

    def parse(self, query: Mapping[str, str]) -> dict[str, Any]:
        """Every parameter by name, checked (unknown parameters are ignored)."""
        return {parameter.name: parameter.check(query.get(parameter.name)) for parameter in self.parameters}

    def openapi(self) -> list[dict[str, Any]]:
        return [parameter.openapi() for parameter in self.parameters]


_DIGITS = re.compile(r"[0-9]{1,16}")


def last_event_id(raw: str | None) -> int | None:
    """The ``Last-Event-ID`` header of a stream that resumes: the ``id:`` of the last event received, which the
    stream sends as decimal digits, and only that (an EventSource sends back exactly what it got)."""
    if raw is None:
        return None
    text = raw.strip()
    if _DIGITS.fullmatch(text) is None or int(text) > MAX_SAFE_INTEGER:
        raise invalid_request("Last-Event-ID", "must be the id of an event received: a seq in decimal digits")
    return int(text)


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _query_integer(raw: str | None, name: str, *, default: int | None) -> int | None:
    """A query parameter that is a number with an integral value (``3`` and ``3.0`` alike), or absent."""
    if raw is None:
        return default
    text = raw.strip()
    if _JSON_NUMBER.fullmatch(text) is None:  # float() would also take "1_0", "+3", "nan" and "infinity"
        raise invalid_request(name, "must be an integer")
    value = float(text)
    if not value.is_integer():
        raise invalid_request(name, "must be an integer")
    # Beyond the safe range only the sign matters: every such value is out of any range the API accepts.
    return int(value) if is_safe_integer(value) else (2**62 if value > 0 else -(2**62))


# -- the requests of spec 3 ------------------------------------------------------------------------------------------

_INSTANCE = Member(
    "instance", Kind.STRING, "the session incarnation the client has seen; on a mismatch nothing is done"
)
_EXPECTED_SEQ = Member(
    "expectedSeq", Kind.INTEGER, "the log length the client has seen; on a mismatch nothing is done", minimum=0
)
_AT_SEQ = Member("atSeq", Kind.INTEGER, "the seq of a turn/end to take the seed at (omitted: the whole log)", minimum=0)

CREATE = BodyShape(
    "SessionCreate",
    "POST /sessions: every member is optional; a snapshot's answer posted as is creates the fork's child",
    (
        Member("id", Kind.ID, "the new session's id (omitted: the server picks session-<uuid4>)"),
        Member("seed", Kind.SEED, "the events the session starts with, checked like appended ones"),
        Member("meta", Kind.META, "the header's fields"),
        Member("source", Kind.IGNORED, "ignored (so that a snapshot's answer can be posted as is)"),
    ),
    element_member="seed",
)
APPEND = BodyShape(
    "AppendRequest",
    "POST /sessions/{id}/events: events stored atomically (all of them, or none)",
    (
        Member(
            "events",
            Kind.EVENTS,
            "the events to append; the server assigns seq and time",
            required=True,
            minimum=1,
            maximum=MAX_APPEND_EVENTS,
        ),
        _EXPECTED_SEQ,
        _INSTANCE,
    ),
    element_member="events",
    empty_is_object=False,
)
INTERRUPT = BodyShape(
    "InterruptRequest",
    "POST /sessions/{id}/interrupt (the body may be empty): the open turn closed as DSH closes an abandoned one",
    (_EXPECTED_SEQ, _INSTANCE),
)
SNAPSHOT = BodyShape(
    "SnapshotRequest", "POST /sessions/{id}/snapshot (the body may be empty)", (_INSTANCE, _AT_SEQ, _EXPECTED_SEQ)
)
FORK = BodyShape(
    "ForkRequest",
    "POST /sessions/{id}/fork (the body may be empty); at most one of atSeq, atTurn and atMessageId",
    (
        _INSTANCE,
        _AT_SEQ,
        _EXPECTED_SEQ,
        Member("sessionId", Kind.ID, "the child's id (omitted: the server picks session-<uuid4>)"),
        Member(
            "atTurn",
            Kind.INTEGER,
            "the seed ends at the turn/end whose data.turn is this number (0: the empty seed)",
            minimum=0,
        ),
        Member(
            "atMessageId",
            Kind.STRING,
            "the id of an assistant/message's message: the seed ends at the turn/end of its turn (inclusive)",
        ),
        Member(
            "events",
            Kind.EVENTS,
            "events appended to the child after its seed in the same atomic step, checked as an append",
            minimum=1,
            maximum=MAX_APPEND_EVENTS,
        ),
    ),
    element_member="events",
)
UPDATE = BodyShape(
    "SessionUpdate",
    "PATCH /sessions/{id}: archive or unarchive the session (no event is written)",
    (
        Member(
            "archived",
            Kind.BOOLEAN,
            "true hides the session from lists and searches unless they ask for archived ones; false shows it again",
            required=True,
        ),
        _EXPECTED_SEQ,
        _INSTANCE,
    ),
    empty_is_object=False,
)
# A fork names its boundary one way at most.
FORK_BOUNDARIES = ("atSeq", "atTurn", "atMessageId")

LIST_QUERY = QueryShape(
    (
        QueryParameter("parent", Kind.ID, "only the children of this session"),
        QueryParameter("limit", Kind.INTEGER, "page size", default=100, minimum=1, maximum=1000),
        QueryParameter(
            "cursor", Kind.STRING, "the nextCursor of the previous page (of the same query: order, filters and q)"
        ),
        QueryParameter(
            "order",
            Kind.STRING,
            "created (the default; by createdAt, then id) or updated (by updatedAt, then id)",
            choices=("created", "updated"),
        ),
        QueryParameter(
            "direction",
            Kind.STRING,
            "asc or desc; the default is asc by created, desc by updated",
            choices=("asc", "desc"),
        ),
        QueryParameter("cwd", Kind.STRING, "only sessions whose cwd equals it"),
        QueryParameter("origin", Kind.STRING, "only sessions whose origin equals it"),
        QueryParameter("agentPreset", Kind.STRING, "only sessions whose agentPreset equals it"),
        QueryParameter(
            "archived",
            Kind.STRING,
            "false (the default: archived sessions are hidden), true (only archived ones) or any",
            choices=("false", "true", "any"),
        ),
        QueryParameter(
            "q",
            Kind.STRING,
            "only sessions that match this search: every word of it a word of the session's title, cwd or user and "
            "assistant messages' text, the last word also as the start of one (then the order defaults to updated)",
            minimum=1,
            maximum=200,
        ),
    )
)
READ_QUERY = QueryShape(
    (
        QueryParameter("from", Kind.INTEGER, "the first seq", default=0, minimum=0, maximum=MAX_SAFE_INTEGER),
        QueryParameter("limit", Kind.INTEGER, "at most this many events", default=1000, minimum=1, maximum=10000),
        QueryParameter(
            "waitMs",
            Kind.INTEGER,
            "when no event at from or after is stored yet, wait up to this many ms for one (a long-poll)",
            default=0,
            minimum=0,
            maximum=60000,
        ),
    )
)
STREAM_QUERY = QueryShape(
    (
        QueryParameter(
            "from",
            Kind.INTEGER,
            "the first seq to send (a Last-Event-ID header wins)",
            default=0,
            minimum=0,
            maximum=MAX_SAFE_INTEGER,
        ),
        QueryParameter("instance", Kind.STRING, "the session incarnation the client has seen"),
    )
)
HISTORY_QUERY = QueryShape(
    (QueryParameter("atSeq", Kind.INTEGER, "the seq of a turn/end: the history at that boundary", minimum=0),)
)
