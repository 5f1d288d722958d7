"""Checking one session file's bytes: what session they hold, or why they are damaged (spec section 4, "Recovery").

Only a final fragment without a trailing newline is torn (never acknowledged) and dropped. Any other damage (an
unparsable or empty line, a seq gap, a malformed packed row, an event that breaks the rules) makes the session
corrupt. A file's lines are checked a window at a time; a window of canonical lines (as forklog writes them) is
checked as it lies, the long way otherwise (which says where and why a file is damaged).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import orjson

from app.backends.files.checkpoints.records import COLD_BYTES, ColdLog, RecordChain
from app.backends.files.start.checked_log import CheckedLog
from app.backends.log_parts import log_parts, resume_log
from app.domain.dsh_records import (
    MalformedRecord,
    canonical_header,
    decode_line,
    expand_record,
    header_from_record,
    header_problem,
    may_round_trip_lossily,
    parse_line,
)
from app.domain.errors import EventRejected
from app.domain.jsonvalue import JsonSyntaxError, JsonTooDeep
from app.domain.log import SessionLog
from app.domain.log_state import LogState
from app.domain.session import SessionHeader
from app.domain.staging import StagedEvents
from app.domain.staging_rules import stage_stored
from app.domain.stats import SessionStats

__all__ = ["CorruptLog", "RecoveredLog", "check_log", "parse_header", "recover_log", "salvage_log"]

# Lines are recovered a window of about this many bytes at a time (a hundred or two events: their objects are made,
# checked and freed while they are still in the processor's cache; 64 KB windows checked about 5% slower).
WINDOW_BYTES = 32 * 1024


class GrowingLog(Protocol):
    """What a check grows: a :class:`SessionLog` (a start's own check), or a worker's :class:`CheckedLog`."""

    state: LogState

    def __len__(self) -> int: ...

    def event(self, seq: int) -> dict[str, Any]: ...

    def stage(self, raws: Sequence[Any], *, appended: bool, now: int) -> StagedEvents: ...

    def commit(self, staged: StagedEvents) -> None: ...


Grown = TypeVar("Grown", bound=GrowingLog)


class CorruptLog(Exception):
    """The file is damaged beyond a torn last line; ``reason`` says where and how. Internal to the files backend
    (not a :class:`~app.domain.errors.ForklogError`): a start sets the session aside for ``/readyz``, a read turns it
    into :class:`~app.backends.errors.SessionCorrupt`."""

    def __init__(self, reason: str, created_at: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.created_at = created_at  # from the header, when the header itself is whole


class RecoveredLog:
    """What a file held (a plain class: a start makes one per session)."""

    __slots__ = ("checked_events", "checkpointed", "committed_bytes", "events", "header", "log", "torn_bytes")

    def __init__(
        self,
        header: SessionHeader,
        log: SessionLog | ColdLog,
        committed_bytes: int,
        torn_bytes: int,
        *,
        events: int,
        checked_events: int,
        checkpointed: int,
    ) -> None:
        self.header = header
        self.log = log
        self.committed_bytes = committed_bytes  # the file's size after dropping a torn tail
        self.torn_bytes = torn_bytes  # how many bytes of torn tail were dropped
        self.events = events
        self.checked_events = checked_events  # checked against every rule (the others resumed from a checkpoint)
        self.checkpointed = checkpointed  # covered by a durable checkpoint; -1: the file does not hold the log as is


def parse_header(data: bytes, session_id: str) -> SessionHeader:
    """The checked header on the first line of a session file's ``data``, else :class:`CorruptLog`."""
    header_end = data.find(b"\n")
    if header_end < 0:
        raise CorruptLog("empty or header-less session log (no complete header line)")
    header = canonical_header(data[:header_end], session_id)
    if header is not None:
        return header
    try:
        record = parse_line(data[:header_end])
    except (JsonSyntaxError, JsonTooDeep, MalformedRecord) as exc:
        raise CorruptLog(f"header line is not valid JSON: {exc}") from None
    problem = header_problem(record, session_id)
    if problem is not None:
        raise CorruptLog(problem)
    return header_from_record(record, session_id)


def recover_log(session_id: str, data: bytes, *, now: int, chain: RecordChain | None = None) -> RecoveredLog:
    """The session a file's bytes hold, or :class:`CorruptLog`.

    With a checkpoint ``chain`` of the header's instance whose bytes the file still begins with, that prefix is
    resumed instead of checked again. A small log resumed whole is kept frozen (:class:`ColdLog`).
    """
    header = parse_header(data, session_id)
    start = data.find(b"\n") + 1
    committed = data.rfind(b"\n") + 1
    body = memoryview(data)[start:committed]
    resumed: SessionLog | None = None
    if chain is not None and chain.instance == header.instance and chain.holds(body):
        frozen = None
        if chain.body_stop == len(body) and len(body) <= COLD_BYTES and len(chain.records) == 1:
            frozen = ColdLog.of(chain.last, body)
        if frozen is not None:
            return RecoveredLog(
                header,
                frozen,
                committed,
                len(data) - committed,
                events=chain.stop,
                checked_events=0,
                checkpointed=chain.stop,
            )
        try:
            resumed = resume_log(body[: chain.body_stop], chain.parts())
        except (ValueError, TypeError, KeyError, OverflowError):
            resumed = None
    resumed_events = len(resumed) if resumed is not None else 0
    try:
        if resumed is None:
            log, mirrored = _recover_events(data, start, _empty(SessionLog(), header), now=now, line_no=1)
        else:
            log, mirrored = _recover_events(data, start + resumed.byte_size, resumed, now=now, line_no=1 + len(resumed))
    except CorruptLog as exc:
        raise CorruptLog(exc.reason, header.created_at) from None
    if mirrored and len(log) > resumed_events and log.byte_size >= log.seal_bytes:
        log = resume_log(body, log_parts(log))  # the file's bytes themselves, not the copies checking made
    return RecoveredLog(
        header,
        log,
        committed_bytes=committed,
        torn_bytes=len(data) - committed,
        events=len(log),
        checked_events=len(log) - resumed_events,
        checkpointed=resumed_events if mirrored else -1,
    )


def check_log(session_id: str, data: bytes, *, now: int) -> tuple[SessionHeader, CheckedLog, bool]:
    """Every event of a file's bytes checked (else :class:`CorruptLog`): its header, what a checkpoint record of its
    log needs, and whether the log's lines are the file's own bytes (a worker's check: only that record is kept)."""
    header = parse_header(data, session_id)
    try:
        log, mirrored = _recover_events(data, data.find(b"\n") + 1, _empty(CheckedLog(), header), now=now, line_no=1)
    except CorruptLog as exc:
        raise CorruptLog(exc.reason, header.created_at) from None
    return header, log, mirrored


def _empty(log: Grown, header: SessionHeader) -> Grown:
    """``log``, empty, set to count its own usage after the header's seed (spec 17)."""
    log.state.stats = SessionStats(header.seed_length or 0)
    return log


def _recover_events(data: bytes, position: int, log: Grown, *, now: int, line_no: int) -> tuple[Grown, bool]:
    """``log`` grown by the whole lines from ``position`` on (``line_no`` is the line before it), and whether those
    lines are the very bytes the log holds (no packed row expanded, nothing written another way); a final fragment
    without a newline is left out.

    The lines are read a window at a time, so that only one window's events are Python objects at once, and each
    window is parsed by one orjson call when its lines are canonical (as forklog writes them).
    """
    committed = data.rfind(b"\n") + 1
    mirrored = True
    while position < committed:
        cut = data.rfind(b"\n", position, min(position + WINDOW_BYTES, committed)) + 1
        end = cut if cut > position else data.index(b"\n", position) + 1
        window = data[position:end]
        lines = window.split(b"\n")
        lines.pop()  # (the empty piece after the window's last newline)
        staged = _stage_canonical(log, window, lines, now=now)
        if staged is None:  # not all canonical stored events, or damaged: checked the long way (which says why)
            events = _window_events(lines, line_no, len(log))
            try:
                staged = log.stage(events, appended=False, now=now)
            except EventRejected as rejected:
                raise CorruptLog(f"event seq {len(log) + rejected.index} breaks the rules: {rejected.reason}") from None
            mirrored = mirrored and window == staged.lines
        line_no += len(lines)
        log.commit(staged)
        position = end
    return log, mirrored


def _stage_canonical(log: GrowingLog, window: bytes, lines: list[bytes], *, now: int) -> StagedEvents | None:
    """The window's events staged as they lie (:func:`stage_stored`) when every line is canonical lossless JSON of
    one stored event the rules let through; else None."""
    values = _parse_canonical(lines, window)
    return None if values is None else stage_stored(log, window, lines, values, now=now)


def salvage_log(session_id: str, data: bytes, *, now: int) -> tuple[SessionHeader, SessionLog, str | None]:
    """What a damaged file holds before its damage: its header, the log of its whole lines up to the first one that
    does not decode or breaks a rule, and why the rest was left out (None when nothing was). :class:`CorruptLog`
    when even the header is damaged."""
    header = parse_header(data, session_id)
    start = data.find(b"\n") + 1
    try:
        log, _ = _recover_events(data, start, SessionLog(), now=now, line_no=1)
    except CorruptLog as damage:
        log = SessionLog()
        lines = data[start : data.rfind(b"\n") + 1].split(b"\n")[:-1]
        for number, line in enumerate(lines, start=1):  # again, one line at a time, up to the damage
            try:
                log.commit(log.stage(_window_events([line], number, len(log)), appended=False, now=now))
            except (CorruptLog, EventRejected):
                break
        return header, log, damage.reason
    return header, log, None


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


def _parse_canonical(lines: list[bytes], window: bytes | None = None) -> list[Any] | None:
    """All the lines' values, when every line is canonical lossless JSON of one value; else None (parse each).
    ``window`` is the lines each with its newline, when the caller has it.

    Each line is parsed on its own: the lines joined by commas may parse as well when they do not hold one value
    each (an event split over two lines beside two events on one line), and such a file is damaged. The values
    written back are "[" + the lines joined by "," + "]" exactly when each line is its value's canonical text;
    that is compared without building the joined form (one copy of the window, not four)."""
    if window is None:
        window = b"\n".join([*lines, b""])
    if may_round_trip_lossily(window):
        return None
    try:
        values = list(map(orjson.loads, lines))  # (an empty line raises)
        written = orjson.dumps(values)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None
    if len(written) != len(window) + 1 or not written.startswith(memoryview(window.replace(b"\n", b","))[:-1], 1):
        return None
    return values
