"""Each operation as data: the request to send, whether a retry may repeat it, and how to read its answer.

The sync and async clients share these, so both send the same bytes and read the same answers; only the waiting
differs. A call's body is encoded once, so every retry sends the very bytes (and ``Idempotency-Key``) of the first
attempt: the server recognises a retry by exactly that.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from forklog_client._models import Appended, Event, History, Lineage, Model, Session, Snapshot

__all__ = ["Call", "EventInput", "body_of", "events_page", "session_path", "sessions_page"]

T = TypeVar("T")

EventInput = Mapping[str, Any] | Event
"""An event to send: a plain dict (``{"type": ..., "data": ...}``), or an :class:`Event` read back (a seed)."""


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request: ``read`` turns a 2xx answer's JSON (``None`` for an empty body), or with ``accept`` its bytes
    as they came (a file of that media type), into the result."""

    method: str
    path: str
    read: Callable[[Any], T]
    params: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None
    idempotency_key: str | None = None
    gone_is_done: bool = False  # a delete: a retry answered 404 means an earlier attempt did it
    accept: str | None = None  # the media type of a file to read whole (its bytes, not JSON)

    def answer(self, content: bytes) -> T:
        if self.accept is not None:
            return self.read(content)
        return self.read(json.loads(content) if content else None)

    def headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self.accept is not None:
            headers["Accept"] = self.accept
        if self.content is not None:
            headers["Content-Type"] = "application/json"
        if self.idempotency_key is not None:
            headers["Idempotency-Key"] = self.idempotency_key
        return headers


def session_path(session_id: str, *rest: str) -> str:
    return "/".join(("/sessions", quote(session_id, safe=""), *rest))


def _event_json(event: EventInput) -> Any:
    return event.to_dict() if isinstance(event, Model) else dict(event)


def body_of(**members: Any) -> bytes:
    """The JSON body of the members that are not ``None`` (``None`` means "not given")."""
    present = {name: value for name, value in members.items() if value is not None}
    return json.dumps(present, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _key(given: str | None) -> str:
    return given if given is not None else f"forklog-py-{uuid.uuid4()}"


def _params(**values: Any) -> dict[str, str]:
    return {name: str(value) for name, value in values.items() if value is not None}


def create(
    session_id: str | None,
    seed: Sequence[EventInput] | None,
    meta: Mapping[str, Any] | None,
    idempotency_key: str | None,
) -> Call[Session]:
    events = None if seed is None else [_event_json(event) for event in seed]
    content = body_of(id=session_id, seed=events, meta=None if meta is None else dict(meta))
    return Call("POST", "/sessions", Session, content=content, idempotency_key=_key(idempotency_key))


def get(session_id: str) -> Call[Session]:
    return Call("GET", session_path(session_id), Session)


def delete(session_id: str) -> Call[None]:
    return Call("DELETE", session_path(session_id), lambda _: None, gone_is_done=True)


def append(
    session_id: str,
    events: Sequence[EventInput],
    expected_seq: int | None,
    instance: str | None,
    idempotency_key: str | None,
) -> Call[Appended]:
    content = body_of(events=[_event_json(event) for event in events], expectedSeq=expected_seq, instance=instance)
    path = session_path(session_id, "events")
    return Call("POST", path, Appended, content=content, idempotency_key=_key(idempotency_key))


def update(session_id: str, archived: bool, expected_seq: int | None, instance: str | None) -> Call[Session]:
    """``PATCH /sessions/{id}``: setting ``archived`` twice sets it once, so a retry is harmless."""
    content = body_of(archived=archived, expectedSeq=expected_seq, instance=instance)
    return Call("PATCH", session_path(session_id), Session, content=content)


def interrupt(
    session_id: str, expected_seq: int | None, instance: str | None, idempotency_key: str | None
) -> Call[Appended]:
    """``POST /sessions/{id}/interrupt``: a change of the log, so it carries an ``Idempotency-Key`` as an append."""
    content = body_of(expectedSeq=expected_seq, instance=instance)
    path = session_path(session_id, "interrupt")
    return Call("POST", path, Appended, content=content, idempotency_key=_key(idempotency_key))


def history(session_id: str, at_seq: int | None) -> Call[History]:
    return Call("GET", session_path(session_id, "history"), History, params=_params(atSeq=at_seq))


LOG_MEDIA_TYPES = {"none": "application/x-ndjson", "zstd": "application/zstd"}


def log(session_id: str, compression: str) -> Call[bytes]:
    if compression not in LOG_MEDIA_TYPES:
        raise ValueError(f"compression is 'none' or 'zstd', not {compression!r}")
    return Call("GET", session_path(session_id, "log"), bytes, accept=LOG_MEDIA_TYPES[compression])


def snapshot(session_id: str, instance: str | None, at_seq: int | None, expected_seq: int | None) -> Call[Snapshot]:
    content = body_of(instance=instance, atSeq=at_seq, expectedSeq=expected_seq)
    return Call("POST", session_path(session_id, "snapshot"), Snapshot, content=content)


def fork(
    session_id: str,
    *,
    child_id: str | None,
    instance: str | None,
    at_seq: int | None,
    at_turn: int | None,
    at_message_id: str | None,
    expected_seq: int | None,
    events: Sequence[EventInput] | None,
    idempotency_key: str | None,
) -> Call[Session]:
    content = body_of(
        sessionId=child_id,
        instance=instance,
        atSeq=at_seq,
        atTurn=at_turn,
        atMessageId=at_message_id,
        expectedSeq=expected_seq,
        events=None if events is None else [_event_json(event) for event in events],
    )
    path = session_path(session_id, "fork")
    return Call("POST", path, Session, content=content, idempotency_key=_key(idempotency_key))


def lineage(session_id: str) -> Call[Lineage]:
    return Call("GET", session_path(session_id, "lineage"), Lineage)


@dataclass(frozen=True, slots=True)
class SessionsPage:
    items: list[Session]
    next_cursor: str | None


def sessions_page(filters: Mapping[str, Any], page_size: int, cursor: str | None) -> Call[SessionsPage]:
    def read(body: Any) -> SessionsPage:
        return SessionsPage([Session(item) for item in body["items"]], body.get("nextCursor"))

    params = _params(**filters, limit=page_size, cursor=cursor)
    return Call("GET", "/sessions", read, params=params)


def list_filters(
    parent: str | None,
    order: str | None,
    direction: str | None,
    q: str | None,
    cwd: str | None,
    origin: str | None,
    agent_preset: str | None,
    archived: bool | str | None = None,
) -> dict[str, Any]:
    """The list's query parameters by their wire names, passed through as given (``archived``: ``True``,
    ``False`` or ``"any"``, sent as ``true``, ``false``, ``any``)."""
    return {
        "archived": archived if not isinstance(archived, bool) else ("true" if archived else "false"),
        "parent": parent,
        "order": order,
        "direction": direction,
        "q": q,
        "cwd": cwd,
        "origin": origin,
        "agentPreset": agent_preset,
    }


@dataclass(frozen=True, slots=True)
class EventsPage:
    events: list[Event]
    next_seq: int
    event_count: int

    @property
    def last(self) -> bool:
        return not self.events or self.next_seq >= self.event_count


def events_page(session_id: str, from_seq: int, page_size: int) -> Call[EventsPage]:
    def read(body: Any) -> EventsPage:
        return EventsPage([Event(item) for item in body["events"]], body["nextSeq"], body["eventCount"])

    params = _params(**{"from": from_seq, "limit": page_size})
    return Call("GET", session_path(session_id, "events"), read, params=params)
