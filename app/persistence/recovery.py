"""Rebuilding a session from the bytes of its JSONL file (spec section 4, "Recovery").

Only a final fragment without a trailing newline is torn (never acknowledged) and dropped. Any other damage makes
the session corrupt: the caller leaves the file untouched and keeps the session out of service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from app.domain.errors import EventRejected
from app.domain.jsonvalue import JsonSyntaxError, JsonTooDeep, may_round_trip_lossily
from app.domain.log import SessionLog
from app.domain.store import Session, SessionHeader, derived_instance
from app.persistence.codec import MalformedRecord, decode_line, expand_record, header_problem, parse_line
from app.persistence.index import Index

# Lines are recovered a window of about this many bytes at a time.
WINDOW_BYTES = 4 * 1024 * 1024


class CorruptLog(Exception):
    """The file is damaged beyond a torn last line; ``reason`` says where and how."""

    def __init__(self, reason: str, created_at: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.created_at = created_at  # from the header, when the header itself is whole


@dataclass(frozen=True, slots=True)
class Recovered:
    session: Session
    committed_bytes: int  # the file's size after dropping a torn tail
    torn_bytes: int  # how many bytes of torn tail were dropped


def header_from_record(record: dict[str, object], session_id: str) -> SessionHeader:
    created_at = int(record["createdAt"])  # type: ignore[call-overload]
    instance = record.get("instance")
    delegation_depth = record.get("delegationDepth")
    seed_length = record.get("seedLength")
    return SessionHeader(
        id=session_id,
        created_at=created_at,
        instance=instance if isinstance(instance, str) else derived_instance(session_id, created_at),
        cwd=record.get("cwd"),  # type: ignore[arg-type]
        parent_session=record.get("parentSession"),  # type: ignore[arg-type]
        seed_length=None if seed_length is None else int(seed_length),  # type: ignore[call-overload]
        origin=record.get("origin"),  # type: ignore[arg-type]
        delegation_depth=0 if delegation_depth is None else int(delegation_depth),  # type: ignore[call-overload]
        agent_preset=record.get("agentPreset"),  # type: ignore[arg-type]
    )


def parse_header(data: bytes, session_id: str) -> dict[str, object]:
    """The header record on the first line of a session file's ``data``, checked; else :class:`CorruptLog`."""
    header_end = data.find(b"\n")
    if header_end < 0:
        raise CorruptLog("empty or header-less session log (no complete header line)")
    try:
        record = parse_line(data[:header_end])
    except (JsonSyntaxError, JsonTooDeep, MalformedRecord) as exc:
        raise CorruptLog(f"header line is not valid JSON: {exc}") from None
    problem = header_problem(record, session_id)
    if problem is not None:
        raise CorruptLog(problem)
    assert isinstance(record, dict)
    return record


def recover_session(session_id: str, data: bytes, *, now: int, index: Index | None = None) -> Recovered:
    """The session a file's bytes hold, or :class:`CorruptLog`.

    With an ``index`` whose prefix the file still holds, that prefix is resumed instead of checked again.
    """
    header_end = data.find(b"\n")
    header = header_from_record(parse_header(data, session_id), session_id)
    committed = data.rfind(b"\n") + 1
    start = header_end + 1
    resumed = index.resume(memoryview(data)[start:committed]) if index is not None else None
    try:
        if resumed is None:
            log = _recover_events(data, start, SessionLog(), now=now, line_no=1)
        else:
            log = _recover_events(data, start + resumed.byte_size, resumed, now=now, line_no=1 + len(resumed))
    except CorruptLog as exc:
        raise CorruptLog(exc.reason, header.created_at) from None
    return Recovered(Session(header, log), committed_bytes=committed, torn_bytes=len(data) - committed)


def _recover_events(data: bytes, position: int, log: SessionLog, *, now: int, line_no: int) -> SessionLog:
    """``log`` grown by the whole lines from ``position`` on (``line_no`` is the line before it); a final fragment
    without a newline is left out.

    The lines are read a window at a time, so that only one window's events are Python objects at once, and each
    window is parsed by one orjson call when its lines are canonical (as forklog writes them).
    """
    committed = data.rfind(b"\n") + 1
    while position < committed:
        cut = data.rfind(b"\n", position, min(position + WINDOW_BYTES, committed)) + 1
        end = cut if cut > position else data.index(b"\n", position) + 1
        lines = data[position : end - 1].split(b"\n")
        position = end
        events = _window_events(lines, line_no, len(log))
        line_no += len(lines)
        try:
            log.commit(log.stage(events, appended=False, now=now))
        except EventRejected as rejected:
            raise CorruptLog(f"event seq {len(log) + rejected.index} breaks the rules: {rejected.reason}") from None
    return log


def _window_events(lines: list[bytes], line_no: int, first_seq: int) -> list[Any]:
    """The events of a window of whole lines (``line_no`` is the line before the first), seqs checked."""
    records = _parse_canonical(lines)
    events: list[Any] = []
    for offset, line in enumerate(lines):
        number = line_no + offset + 1
        if records is None:
            if not line.strip():
                raise CorruptLog(f"line {number} is empty")
            try:
                decoded = decode_line(line)
            except (JsonSyntaxError, JsonTooDeep, MalformedRecord) as exc:
                raise CorruptLog(f"line {number} is not a storage record: {exc}") from None
        else:
            try:
                decoded = expand_record(records[offset])
            except MalformedRecord as exc:
                raise CorruptLog(f"line {number} is not a storage record: {exc}") from None
        for event in decoded:
            if not isinstance(event, dict) or "seq" not in event or "time" not in event:
                raise CorruptLog(f"line {number} holds an event without seq and time")
            expected = first_seq + len(events)
            if event["seq"] != expected:
                raise CorruptLog(f"seq gap at line {number} (expected {expected}, got {event['seq']})")
            events.append(event)
    return events


def _parse_canonical(lines: list[bytes]) -> list[Any] | None:
    """All the lines' values in one parse, when every line is canonical lossless JSON; else None (parse each)."""
    joined = b"[" + b",".join(lines) + b"]"
    if any(not line for line in lines) or may_round_trip_lossily(joined):
        return None
    try:
        values = orjson.loads(joined)
        canonical = orjson.dumps(values) == joined
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None
    return values if canonical and isinstance(values, list) and len(values) == len(lines) else None
