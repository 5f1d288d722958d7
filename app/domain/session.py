"""A session's identity, header and head: the values every layer passes around (spec 2.1 and the Session resource).

The header's optional fields are listed once, in :data:`HEADER_FIELDS` (in the order a header is written): the
create's ``meta`` checks, the DSH header record, the Session resource and the OpenAPI document all read that table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

from app.domain.errors import ErrorCode, SessionError
from app.domain.fast_init import fast_init
from app.domain.jsonvalue import is_safe_integer
from app.domain.log_state import LogState
from app.domain.stats import NO_STATS, SessionStats

__all__ = [
    "DEFAULT_TENANT",
    "HEADER_FIELDS",
    "META_KEYS",
    "HeaderField",
    "LogHead",
    "Session",
    "SessionHeader",
    "SessionKey",
    "check_live",
    "check_meta",
    "head_of",
    "lineage_attrs",
]

DEFAULT_TENANT = "default"


class SessionKey(NamedTuple):
    """Which session: ids are per tenant (spec 9), so a session is named by both."""

    tenant: str
    id: str


def _is_count(value: Any) -> bool:
    return is_safe_integer(value) and value >= 0


@dataclass(frozen=True, slots=True)
class HeaderField:
    """One optional field of a session's header.

    ``key`` is its JSON name (in the DSH header, in ``meta`` and in the Session resource alike), ``attr`` its name
    on :class:`SessionHeader`. ``stored`` says whether a value may stand in a stored header (``stored_rule`` says
    what it must be); ``meta_problem`` why a create's ``meta`` value is refused (given the seed's length), or None.
    """

    key: str
    attr: str
    json_type: str
    stored: Callable[[Any], bool]
    stored_rule: str
    meta_problem: Callable[[Any, int], str | None]
    description: str


HEADER_FIELDS: tuple[HeaderField, ...] = (
    HeaderField(
        "cwd",
        "cwd",
        "string",
        lambda value: isinstance(value, str) and value.startswith("/"),
        "an absolute path",
        lambda value, _: None if isinstance(value, str) and value.startswith("/") else "must be an absolute path",
        "the working directory, an absolute path",
    ),
    HeaderField(
        "parentSession",
        "parent_session",
        "string",
        lambda value: isinstance(value, str),
        "a string",
        lambda value, _: None if isinstance(value, str) and value else "must be a non-empty string",
        "the session this one was forked from",
    ),
    HeaderField(
        "seedLength",
        "seed_length",
        "integer",
        _is_count,
        "a non-negative safe integer",
        lambda value, seed: (
            None
            if is_safe_integer(value) and 0 <= value <= seed
            else f"must be an integer from 0 to the seed's length ({seed})"
        ),
        "how many of the first events came from the parent",
    ),
    HeaderField(
        "origin",
        "origin",
        "string",
        lambda value: value == "subagent",
        '"subagent"',
        lambda value, _: None if value == "subagent" else 'must be "subagent"',
        'how the session began: "subagent"',
    ),
    HeaderField(
        "delegationDepth",
        "delegation_depth",
        "integer",
        _is_count,
        "a non-negative safe integer",
        lambda value, _: None if _is_count(value) else "must be a non-negative integer",
        "how deep in a chain of subagents the session is (0 for a top-level one)",
    ),
    HeaderField(
        "agentPreset",
        "agent_preset",
        "string",
        lambda value: isinstance(value, str),
        "a string",
        lambda value, _: None if isinstance(value, str) else "must be a string",
        "the agent preset the session runs with",
    ),
)
# A create's meta also takes createdAt (checked, then ignored: the server assigns it).
META_KEYS = frozenset({*(field.key for field in HEADER_FIELDS), "createdAt"})


@dataclass(frozen=True, slots=True)
class SessionHeader:
    """What a session is, apart from its events: line 1 of its DSH log, with forklog's ``instance``."""

    id: str
    created_at: int
    instance: str
    cwd: str | None = None
    parent_session: str | None = None
    seed_length: int | None = None
    origin: str | None = None
    delegation_depth: int = 0
    agent_preset: str | None = None
    # Hidden from lists unless asked for (spec 17). Not a field of the stored header line: archiving changes no
    # byte of the log; each backend keeps it beside the log, and export writes it into the header it writes.
    archived: bool = False

    def lineage(self) -> dict[str, Any]:
        """The optional fields by their JSON names (``delegationDepth`` always, the others when set)."""
        values = {field.key: getattr(self, field.attr) for field in HEADER_FIELDS}
        return {key: value for key, value in values.items() if value is not None}


_HEADER_ATTRS = frozenset(field.name for field in fields(SessionHeader))
if {field.attr for field in HEADER_FIELDS} - _HEADER_ATTRS:
    raise RuntimeError("HEADER_FIELDS names an attribute SessionHeader lacks")


@fast_init
@dataclass(frozen=True, slots=True)
class LogHead:
    """Where a session's log stands: what the Session resource says of it."""

    count: int = 0
    last_time: int | None = None
    last_type: str | None = None
    last_turn_end_seq: int | None = None
    open_turn: Any = None
    body_bytes: int = 0  # the bytes of the stored lines (the header line not included)
    title: str | None = None
    preview: str | None = None
    stats: SessionStats = NO_STATS  # the figures of spec 17 (the Session's stats, usage and ownUsage)

    @property
    def forkable(self) -> bool:
        """A fork without ``atSeq`` would pass the boundary rule now (spec 2.3)."""
        return self.count == 0 or self.last_type == "turn/end"


def head_of(state: LogState) -> LogHead:
    kept = state.head_kept
    if kept is not None:
        return kept
    head = _head_of(state)
    if state.final:
        state.head_kept = head
    return head


def _head_of(state: LogState) -> LogHead:
    open_turn = state.open_turn
    if isinstance(open_turn, float) and open_turn.is_integer():
        open_turn = int(open_turn)  # DSH compares with ===, so 1.0 opened turn 1: it is reported as 1
    return LogHead(
        state.count,
        state.last_time,
        state.last_type,
        state.last_turn_end_seq,
        open_turn,
        state.body_bytes,
        state.title,
        state.preview,
        state.stats,
    )


@fast_init
@dataclass(frozen=True, slots=True)
class Session:
    """A live session at one instant: the Session resource of spec 3.

    ``changed_at`` is when the server acknowledged the session's last change (its create, fork or latest append),
    epoch ms by the server's own clock: what retention counts from (spec 14). It is never an event's ``time``, which
    a seed may set to any value (and appends after it follow); it is not part of the resource.
    """

    key: SessionKey
    header: SessionHeader
    head: LogHead
    changed_at: int

    @property
    def id(self) -> str:
        return self.header.id

    @property
    def updated_at(self) -> int:
        """The later of ``createdAt`` and the time of the last event (spec 12): a fork's child is as new as the
        fork."""
        last_time = self.head.last_time
        created_at = self.header.created_at
        return created_at if last_time is None or last_time < created_at else int(last_time)


def check_meta(meta: dict[str, Any], seed_count: int) -> dict[str, Any]:
    """:class:`SessionHeader` fields from a create's ``meta`` (a ``null`` value is absent); a bad value is
    INVALID_SEED (the meta travels with the seed). Unknown keys are the caller's to refuse (request syntax)."""
    values: dict[str, Any] = {}
    for field in HEADER_FIELDS:
        value = meta.get(field.key)
        if value is None:
            continue
        problem = field.meta_problem(value, seed_count)
        if problem is None and isinstance(value, str) and "\x00" in value:
            # No store keeps U+0000 in a header field (PostgreSQL's text cannot hold it): refused alike everywhere.
            problem = "must not hold the character U+0000"
        if problem is not None:
            reason = f"meta.{field.key} {problem}"
            raise SessionError(ErrorCode.INVALID_SEED, reason, reason=reason)
        values[field.attr] = int(value) if field.json_type == "integer" else value
    created_at = meta.get("createdAt")
    if created_at is not None and not _is_count(created_at):
        reason = "meta.createdAt must be a non-negative integer of epoch milliseconds"
        raise SessionError(ErrorCode.INVALID_SEED, reason, reason=reason)
    return values


def lineage_attrs(values: dict[str, Any]) -> dict[str, Any]:
    """:class:`SessionHeader` fields by attribute name from the same values by their JSON names."""
    return {field.attr: values[field.key] for field in HEADER_FIELDS if values.get(field.key) is not None}


def check_live(
    session: Session,
    instance: str | None,
    expected_seq: int | None,
    *,
    count: int | None = None,
    error: type[SessionError] = SessionError,
) -> None:
    """Refuse an operation whose ``instance`` or ``expectedSeq`` does not match the live session (spec 2.4);
    ``count`` is the log length to compare with when appends are already staged after the stored head, ``error``
    the class to raise (a snapshot or fork raises :class:`SessionForkError`)."""
    if instance is not None and instance != session.header.instance:
        raise error(
            ErrorCode.SESSION_NOT_LIVE,
            f'instance "{instance}" is not the live incarnation of session "{session.id}"; re-read the session',
        )
    current = session.head.count if count is None else count
    if expected_seq is not None and expected_seq != current:
        raise error(
            ErrorCode.SEQ_CONFLICT,
            f"expectedSeq does not match the log length {current}; re-read the session and retry",
            currentSeq=current,
        )
