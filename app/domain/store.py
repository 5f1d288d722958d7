"""The session store: live sessions, their lineage, and the RFC's snapshot and fork (spec section 2).

Operations that change something come in two halves, ``prepare_*`` and ``commit_*``: the first checks everything
(in the spec's check order) and computes the change without making it visible; the caller makes it durable and then
commits it, or drops it when the disk refuses. The store itself is synchronous and does no I/O.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from app.domain.errors import ErrorCode, EventRejected, SessionError
from app.domain.events import LogState
from app.domain.jsonvalue import is_safe_integer
from app.domain.log import SessionLog, StagedEvents

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
META_KEYS = frozenset({"cwd", "parentSession", "seedLength", "origin", "delegationDepth", "agentPreset", "createdAt"})
_INSTANCE_NAMESPACE = uuid.UUID("6f1e0c52-5d0b-4a4e-9a63-3f0d2f1c9b7e")


def is_valid_id(value: Any) -> bool:
    return isinstance(value, str) and ID_PATTERN.fullmatch(value) is not None


def check_id(value: Any, field_name: str = "id") -> str:
    if not is_valid_id(value):
        raise SessionError(
            ErrorCode.INVALID_REQUEST,
            f"{field_name} must be 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit",
            errors=[{"field": field_name, "reason": "not a valid session id"}],
        )
    return str(value)


def derived_instance(session_id: str, created_at: int) -> str:
    """The stable instance of a log written without one (a DSH log)."""
    return uuid.uuid5(_INSTANCE_NAMESPACE, f"{session_id}:{created_at}").hex


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class SessionHeader:
    id: str
    created_at: int
    instance: str
    cwd: str | None = None
    parent_session: str | None = None
    seed_length: int | None = None
    origin: str | None = None
    delegation_depth: int = 0
    agent_preset: str | None = None

    def record(self) -> dict[str, Any]:
        """The DSH header record (line 1 of the session's file), with forklog's ``instance``."""
        record: dict[str, Any] = {
            "type": "session",
            "version": 0,
            "id": self.id,
            "createdAt": self.created_at,
        }
        if self.cwd is not None:
            record["cwd"] = self.cwd
        if self.parent_session is not None:
            record["parentSession"] = self.parent_session
        if self.seed_length is not None:
            record["seedLength"] = self.seed_length
        if self.origin is not None:
            record["origin"] = self.origin
        record["delegationDepth"] = self.delegation_depth
        if self.agent_preset is not None:
            record["agentPreset"] = self.agent_preset
        record["instance"] = self.instance
        return record


@dataclass(frozen=True, slots=True)
class SessionView:
    """A session as a client sees it at one instant (the spec's Session resource)."""

    id: str
    instance: str
    created_at: int
    cwd: str | None
    parent_session: str | None
    seed_length: int | None
    origin: str | None
    delegation_depth: int
    agent_preset: str | None
    event_count: int
    last_event_type: str | None
    open_turn: Any
    last_turn_end_seq: int | None
    forkable: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "instance": self.instance,
            "createdAt": self.created_at,
            "cwd": self.cwd,
            "parentSession": self.parent_session,
            "seedLength": self.seed_length,
            "origin": self.origin,
            "delegationDepth": self.delegation_depth,
            "agentPreset": self.agent_preset,
            "eventCount": self.event_count,
            "lastEventType": self.last_event_type,
            "openTurn": self.open_turn,
            "lastTurnEndSeq": self.last_turn_end_seq,
            "forkable": self.forkable,
        }


class Session:
    """A live session: its header and its log."""

    __slots__ = ("header", "log")

    def __init__(self, header: SessionHeader, log: SessionLog) -> None:
        self.header = header
        self.log = log

    @property
    def id(self) -> str:
        return self.header.id

    def view(self) -> SessionView:
        return self.view_at(self.log.state)

    def view_at(self, state: LogState) -> SessionView:
        """The session as it is (or will be, for a staged state) when its log's rules are in ``state``."""
        header = self.header
        open_turn = state.open_turn
        if isinstance(open_turn, float) and open_turn.is_integer():
            open_turn = int(open_turn)
        return SessionView(
            id=header.id,
            instance=header.instance,
            created_at=header.created_at,
            cwd=header.cwd,
            parent_session=header.parent_session,
            seed_length=header.seed_length,
            origin=header.origin,
            delegation_depth=header.delegation_depth,
            agent_preset=header.agent_preset,
            event_count=state.count,
            last_event_type=state.last_type,
            open_turn=open_turn,
            last_turn_end_seq=state.last_turn_end_seq,
            forkable=state.count == 0 or state.last_type == "turn/end",
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The RFC's snapshot: the source as it was, an independent copy of the seed, and the child's meta."""

    source: SessionView
    seed: SessionLog
    meta: dict[str, Any]


@dataclass(slots=True)
class PendingCreate:
    """A session checked and built, not yet live: make ``header`` + ``session.log`` durable, then commit."""

    session: Session


@dataclass(slots=True)
class PendingAppend:
    session: Session
    staged: StagedEvents


def _seq_conflict(current: int) -> SessionError:
    return SessionError(
        ErrorCode.SEQ_CONFLICT,
        f"expectedSeq does not match the log length {current}; re-read the session and retry",
        currentSeq=current,
    )


class SessionStore:
    def __init__(
        self,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        new_id: Callable[[], str] = lambda: f"session-{uuid.uuid4()}",
        new_instance: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self._clock = clock
        self._new_id = new_id
        self._new_instance = new_instance
        self._sessions: dict[str, Session] = {}
        self._order: list[tuple[int, str]] = []
        self._reserved: set[str] = set()
        self._corrupt: dict[str, str] = {}
        self._max_created_at = -1

    # -- lookups ---------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._sessions)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def _check_not_corrupt(self, session_id: str) -> None:
        if session_id in self._corrupt:
            raise SessionError(
                ErrorCode.SESSION_CORRUPT,
                f'session "{session_id}" has a damaged log and is kept out of service until an operator repairs it',
                reason=self._corrupt[session_id],
            )

    def get(self, session_id: str) -> Session:
        self._check_not_corrupt(session_id)
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionError(ErrorCode.SESSION_NOT_FOUND, f'session "{session_id}" not found')
        return session

    def _check_free(self, session_id: str) -> None:
        self._check_not_corrupt(session_id)
        if session_id in self._sessions or session_id in self._reserved:
            raise SessionError(
                ErrorCode.SESSION_ALREADY_EXISTS,
                f'session "{session_id}" already exists; pick another id or omit it',
            )

    def _check_live(
        self, session: Session, instance: str | None, expected_seq: int | None, length: int | None = None
    ) -> None:
        if instance is not None and instance != session.header.instance:
            raise SessionError(
                ErrorCode.SESSION_NOT_LIVE,
                f'instance "{instance}" is not the live incarnation of session "{session.id}"; re-read the session',
            )
        current = len(session.log) if length is None else length
        if expected_seq is not None and expected_seq != current:
            raise _seq_conflict(current)

    def page(
        self, *, parent: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> tuple[list[Session], str | None]:
        """Sessions in creation order (createdAt, id), a page at a time."""
        start = 0
        if cursor is not None:
            start = bisect_right(self._order, _decode_cursor(cursor))
        items: list[Session] = []
        next_cursor: str | None = None
        for key in self._order[start:]:
            session = self._sessions[key[1]]
            if parent is not None and session.header.parent_session != parent:
                continue
            if len(items) == limit:
                last = items[-1].header
                next_cursor = _encode_cursor((last.created_at, last.id))
                break
            items.append(session)
        return items, next_cursor

    def sessions(self) -> list[Session]:
        """Every live session, in creation order."""
        return [self._sessions[session_id] for _, session_id in self._order]

    def corrupt_ids(self) -> dict[str, str]:
        return dict(self._corrupt)

    # -- create ----------------------------------------------------------------------------------------------------

    def _next_created_at(self) -> int:
        # Reserved at prepare time: creates prepared before either commits still get distinct, increasing values.
        self._max_created_at = max(self._clock(), self._max_created_at + 1)
        return self._max_created_at

    def now(self) -> int:
        return self._clock()

    def new_id(self) -> str:
        """A fresh generated id (``session-<uuid4>``)."""
        return self._new_id()

    def check_create(
        self, session_id: str | None, seed: Sequence[Any] | None = None, meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The cheap checks of a create, in the contract's order (meta syntax, id live, meta values); the header
        fields the meta gives. The seed itself is checked by :func:`build_seed_log`."""
        if meta is not None:
            unknown = sorted(key for key in meta if key not in META_KEYS)
            if unknown:
                raise SessionError(
                    ErrorCode.INVALID_REQUEST,
                    f"meta accepts only {', '.join(sorted(META_KEYS))}",
                    errors=[{"field": f"meta.{key}", "reason": "unknown member"} for key in unknown],
                )
        if session_id is not None:
            check_id(session_id)
            self._check_free(session_id)
        return _check_meta(meta or {}, len(seed) if seed is not None else 0)

    def prepare_create(
        self,
        session_id: str | None = None,
        seed: Sequence[Any] | None = None,
        meta: dict[str, Any] | None = None,
        *,
        seed_breaks: dict[int, str] | None = None,
        seed_log: SessionLog | None = None,
    ) -> PendingCreate:
        """Check a create (``id`` live first, then the meta and the seed) and build the session, not yet live.

        ``seed_log``, when given, is the seed already checked by :func:`build_seed_log` (off the event loop).
        """
        fields = self.check_create(session_id, seed, meta)
        if session_id is None:
            session_id = self._new_id()
            self._check_free(session_id)
        log = seed_log if seed_log is not None else build_seed_log(seed, now=self._clock(), breaks=seed_breaks)
        header = SessionHeader(
            id=session_id, created_at=self._next_created_at(), instance=self._new_instance(), **fields
        )
        self._reserved.add(session_id)
        return PendingCreate(Session(header, log))

    def commit_create(self, pending: PendingCreate) -> Session:
        session = pending.session
        self._reserved.discard(session.id)
        self._add(session)
        return session

    def abort_create(self, pending: PendingCreate) -> None:
        self._reserved.discard(pending.session.id)

    def _add(self, session: Session) -> None:
        self._sessions[session.id] = session
        insort(self._order, (session.header.created_at, session.id))
        self._max_created_at = max(self._max_created_at, session.header.created_at)

    # -- recovery --------------------------------------------------------------------------------------------------

    def adopt(self, session: Session) -> None:
        """Make a session recovered from storage live."""
        self._check_free(session.id)
        self._add(session)

    def quarantine(self, session_id: str, reason: str, *, created_at: int | None = None) -> None:
        """Keep a damaged session out of service: every request naming it answers SESSION_CORRUPT.

        Its ``created_at`` (when its header could be read) still counts: a later create sorts after it.
        """
        self._corrupt[session_id] = reason
        if created_at is not None:
            self._max_created_at = max(self._max_created_at, created_at)

    # -- delete ----------------------------------------------------------------------------------------------------

    def prepare_delete(self, session_id: str) -> Session:
        return self.get(session_id)

    def commit_delete(self, session_id: str) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            key = (session.header.created_at, session_id)
            at = bisect_left(self._order, key)
            if at < len(self._order) and self._order[at] == key:
                del self._order[at]

    # -- append ----------------------------------------------------------------------------------------------------

    def prepare_append(
        self,
        session_id: str,
        events: Sequence[Any],
        *,
        expected_seq: int | None = None,
        instance: str | None = None,
        breaks: dict[int, str] | None = None,
        after: StagedEvents | None = None,
    ) -> PendingAppend:
        """Check an append; with ``after`` (a batch of the same session staged, not yet committed), as if that
        batch were already in the log."""
        session = self.get(session_id)
        self._check_live(session, instance, expected_seq, None if after is None else after.state.count)
        try:
            staged = session.log.stage(events, appended=True, now=self._clock(), breaks=breaks, after=after)
        except EventRejected as rejected:
            raise SessionError(
                ErrorCode.INVALID_EVENT,
                f"event at index {rejected.index} is invalid: {rejected.reason}",
                index=rejected.index,
                reason=rejected.reason,
            ) from None
        return PendingAppend(session, staged)

    def commit_append(self, pending: PendingAppend) -> None:
        pending.session.log.commit(pending.staged)

    # -- snapshot and fork -----------------------------------------------------------------------------------------

    def _boundary(self, session: Session, at_seq: int | None) -> int:
        """The seed length the boundary rule allows, or the refusal."""
        log = session.log
        count = len(log)
        if at_seq is None:
            if count == 0 or log.state.last_type == "turn/end":
                return count
            state = log.state
            raise SessionError(
                ErrorCode.NOT_AT_TURN_BOUNDARY,
                f'session "{session.id}" is not at a turn boundary (last event: {state.last_type}); wait for '
                "turn/end, or pass atSeq = lastTurnEndSeq",
                lastEventType=state.last_type,
                openTurn=session.view().open_turn,
                lastTurnEndSeq=state.last_turn_end_seq,
            )
        if at_seq < 0 or at_seq >= count:
            last = "none" if count == 0 else str(count - 1)
            raise SessionError(
                ErrorCode.INVALID_BOUNDARY,
                f'atSeq {at_seq} does not exist in session "{session.id}" (last seq: {last}); pick a turn/end seq',
            )
        if not log.is_turn_end(at_seq):
            raise SessionError(
                ErrorCode.INVALID_BOUNDARY,
                f'atSeq {at_seq} in session "{session.id}" is not a turn/end; pick a turn/end seq',
            )
        return at_seq + 1

    def snapshot(
        self,
        session_id: str,
        *,
        at_seq: int | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
    ) -> Snapshot:
        source = self.get(session_id)
        self._check_live(source, instance, expected_seq)
        count = self._boundary(source, at_seq)
        meta: dict[str, Any] = {"parentSession": source.id, "seedLength": count}
        if source.header.cwd is not None:
            meta["cwd"] = source.header.cwd
        return Snapshot(source=source.view(), seed=source.log.prefix(count), meta=meta)

    def prepare_fork(
        self,
        session_id: str,
        *,
        child_id: str | None = None,
        at_seq: int | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
    ) -> PendingCreate:
        if child_id is not None:
            check_id(child_id, "sessionId")
            self._check_free(child_id)
        snapshot = self.snapshot(session_id, at_seq=at_seq, instance=instance, expected_seq=expected_seq)
        if child_id is None:
            child_id = self._new_id()
            self._check_free(child_id)
        header = SessionHeader(
            id=child_id,
            created_at=self._next_created_at(),
            instance=self._new_instance(),
            cwd=snapshot.meta.get("cwd"),
            parent_session=snapshot.meta["parentSession"],
            seed_length=snapshot.meta["seedLength"],
        )
        self._reserved.add(child_id)
        return PendingCreate(Session(header, snapshot.seed))

    # -- history ---------------------------------------------------------------------------------------------------

    def history(self, session_id: str, at_seq: int | None = None) -> tuple[list[Any], int]:
        session = self.get(session_id)
        if at_seq is not None:
            self._boundary(session, at_seq)
        return session.log.history(at_seq), len(session.log)


def build_seed_log(seed: Sequence[Any] | None, *, now: int, breaks: dict[int, str] | None = None) -> SessionLog:
    """A new log holding ``seed``, every event checked; INVALID_SEED names the lowest bad index. Pure: safe to run
    in a worker thread."""
    log = SessionLog()
    if seed:
        try:
            log.commit(log.stage(seed, appended=False, now=now, breaks=breaks))
        except EventRejected as rejected:
            raise SessionError(
                ErrorCode.INVALID_SEED,
                f"seed event at index {rejected.index} is invalid: {rejected.reason}",
                index=rejected.index,
                reason=rejected.reason,
            ) from None
    return log


def _check_meta(meta: dict[str, Any], seed_count: int) -> dict[str, Any]:
    """Header fields from a create's meta; a bad value is INVALID_SEED (the meta travels with the seed)."""

    def bad(key: str, why: str) -> SessionError:
        return SessionError(ErrorCode.INVALID_SEED, f"meta.{key} {why}", reason=f"meta.{key} {why}")

    fields: dict[str, Any] = {}
    value = meta.get("cwd")
    if value is not None:
        if not isinstance(value, str) or not value.startswith("/"):
            raise bad("cwd", "must be an absolute path")
        fields["cwd"] = value
    value = meta.get("parentSession")
    if value is not None:
        if not isinstance(value, str) or value == "":
            raise bad("parentSession", "must be a non-empty string")
        fields["parent_session"] = value
    value = meta.get("seedLength")
    if value is not None:
        if not is_safe_integer(value) or not 0 <= value <= seed_count:
            raise bad("seedLength", f"must be an integer from 0 to the seed's length ({seed_count})")
        fields["seed_length"] = int(value)
    value = meta.get("origin")
    if value is not None:
        if value != "subagent":
            raise bad("origin", 'must be "subagent"')
        fields["origin"] = value
    value = meta.get("delegationDepth")
    if value is not None:
        if not is_safe_integer(value) or value < 0:
            raise bad("delegationDepth", "must be a non-negative integer")
        fields["delegation_depth"] = int(value)
    value = meta.get("agentPreset")
    if value is not None:
        if not isinstance(value, str):
            raise bad("agentPreset", "must be a string")
        fields["agent_preset"] = value
    value = meta.get("createdAt")
    if value is not None and (not is_safe_integer(value) or value < 0):
        raise bad("createdAt", "must be a non-negative integer of epoch milliseconds")
    return fields


def _encode_cursor(key: tuple[int, str]) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode("ascii").rstrip("=")


def _decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, session_id = orjson.loads(raw)
        if isinstance(created_at, int) and not isinstance(created_at, bool) and isinstance(session_id, str):
            return created_at, session_id
    except (ValueError, TypeError):
        pass
    raise SessionError(
        ErrorCode.INVALID_REQUEST,
        "cursor is not one this service issued; start again without it",
        errors=[{"field": "cursor", "reason": "malformed cursor"}],
    )
