"""Rebuilding sessions from the bytes of their JSONL files (spec section 4, "Recovery").

Only a final fragment without a trailing newline is torn (never acknowledged) and dropped. Any other damage makes
the session corrupt: its file is left untouched and the session is kept out of service. Nothing is followed out of
the data directory: an entry of ``sessions/`` that is a symlink, or anything but a regular file, is never opened.

:class:`Recovery` reads a whole data directory. With ``repair`` (a start) it also empties ``tmp/``, applies cut
records, truncates torn tails and removes stale index files; without it (``verify``) it changes nothing.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from app.backends.base import CorruptEntry
from app.backends.catalog import LiveSession
from app.backends.files.checkpoints import COLD_BYTES, Chain, ColdLog, read_chains
from app.backends.files.codec import (
    MalformedRecord,
    canonical_header,
    decode_line,
    expand_record,
    header_from_record,
    header_problem,
    may_round_trip_lossily,
    parse_line,
)
from app.backends.files.cuts import CUT_SUFFIX, CutRecords
from app.backends.files.datadir import LOG_SUFFIX, DataDir, Space
from app.backends.files.fileops import FileKind, FileOps
from app.backends.files.journal import JOURNAL_NAME, Journal
from app.backends.files.remembered import JOURNAL_NAME as REMEMBERED_NAME
from app.domain.errors import EventRejected
from app.domain.ids import ID_PATTERN
from app.domain.jsonvalue import JsonSyntaxError, JsonTooDeep
from app.domain.log import SessionLog, StagedEvents, stage_stored
from app.domain.session import DEFAULT_TENANT, SessionHeader, SessionKey

__all__ = ["CorruptLog", "RecoveredLog", "Recovery", "RecoveryReport", "recover_log", "salvage_log"]

logger = logging.getLogger("forklog.storage")

# Lines are recovered a window of about this many bytes at a time.
WINDOW_BYTES = 4 * 1024 * 1024


class CorruptLog(Exception):
    """The file is damaged beyond a torn last line; ``reason`` says where and how."""

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


def recover_log(session_id: str, data: bytes, *, now: int, chain: Chain | None = None) -> RecoveredLog:
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
            resumed = SessionLog.resume(body[: chain.body_stop], chain.parts())
        except (ValueError, TypeError, KeyError, OverflowError):
            resumed = None
    resumed_events = len(resumed) if resumed is not None else 0
    try:
        if resumed is None:
            log, mirrored = _recover_events(data, start, SessionLog(), now=now, line_no=1)
        else:
            log, mirrored = _recover_events(data, start + resumed.byte_size, resumed, now=now, line_no=1 + len(resumed))
    except CorruptLog as exc:
        raise CorruptLog(exc.reason, header.created_at) from None
    if mirrored and len(log) > resumed_events and log.byte_size >= log.seal_bytes:
        log = SessionLog.resume(body, log.parts())  # the file's bytes themselves, not the copies checking made
    return RecoveredLog(
        header,
        log,
        committed_bytes=committed,
        torn_bytes=len(data) - committed,
        events=len(log),
        checked_events=len(log) - resumed_events,
        checkpointed=resumed_events if mirrored else -1,
    )


def _recover_events(data: bytes, position: int, log: SessionLog, *, now: int, line_no: int) -> tuple[SessionLog, bool]:
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
        lines = window[:-1].split(b"\n")
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


def _stage_canonical(log: SessionLog, window: bytes, lines: list[bytes], *, now: int) -> StagedEvents | None:
    """The window's events staged as they lie (:func:`stage_stored`) when every line is canonical lossless JSON of
    one stored event the rules let through; else None."""
    try:
        values = list(map(orjson.loads, lines))  # a line each: a value never spans lines
        joined = b"[" + window[:-1].replace(b"\n", b",") + b"]"
        if may_round_trip_lossily(joined) or orjson.dumps(values) != joined:
            return None
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None
    return stage_stored(log, window, lines, values, now=now)


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


# -- a whole data directory ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class RecoveryReport:
    sessions: list[LiveSession] = field(default_factory=list)
    corrupt: list[CorruptEntry] = field(default_factory=list)
    # Per corrupt entry that names a valid id: its key, and its createdAt when its header could be read.
    quarantined: list[tuple[SessionKey, str, int | None]] = field(default_factory=list)
    files: int = 0  # entries of the sessions folders looked at
    events: int = 0  # events recovered
    checked_events: int = 0  # of them, those checked against every rule (not resumed from a checkpoint)
    bytes: int = 0
    # Sessions whose events were checked (all of them, or those after their checkpoint), and how many of each.
    checked: dict[SessionKey, int] = field(default_factory=dict)

    @property
    def resumed_events(self) -> int:
        return self.events - self.checked_events


class Recovery:
    """Reads every session of a data directory (see the module's docstring).

    ``keep=False`` (``verify``) keeps no session in memory, only the counts; ``checkpoints=False`` checks every
    event of every file, ignoring the journal.
    """

    def __init__(
        self,
        datadir: DataDir,
        ops: FileOps,
        cuts: CutRecords,
        *,
        now: int,
        repair: bool,
        sync: bool,
        journal: Journal | None = None,
        keep: bool = True,
    ):
        self._datadir = datadir
        self._ops = ops
        self._cuts = cuts
        self._now = now
        self._repair = repair
        self._sync = sync
        self._journal = journal
        self._keep = keep

    def run(self, progress: Callable[[int], None] | None = None) -> RecoveryReport:
        """Recover every session; ``progress(bytes)`` is called after each file."""
        if self._repair:
            for name, kind in self._entries(self._datadir.tmp):
                # A create or delete that crashed half-way: the file was never linked in, or was already unlinked.
                self._remove_quietly(os.path.join(self._datadir.tmp, name), kind)
        chains = read_chains(self._journal.read()) if self._journal is not None else {}
        report = RecoveryReport()
        for space in self._datadir.spaces():
            self._recover_space(space, chains, report, progress)
        return report

    def count_files(self) -> int:
        """How many entries the sessions folders hold (for a progress bar)."""
        return sum(len(self._entries(space.sessions)) for space in self._datadir.spaces())

    def _entries(self, folder: Path | str) -> list[tuple[str, str]]:
        try:
            return self._ops.scandir(folder)
        except FileNotFoundError:  # a folder verify found missing (a start makes every folder first)
            return []

    def _recover_space(
        self,
        space: Space,
        chains: dict[SessionKey, Chain],
        report: RecoveryReport,
        progress: Callable[[int], None] | None,
    ) -> None:
        cuts: set[str] = set()
        index_folder = str(space.index)
        for name, kind in self._entries(space.index):
            if kind == FileKind.REGULAR and name.endswith(CUT_SUFFIX):
                cuts.add(name[: -len(CUT_SUFFIX)])
            elif space.tenant == DEFAULT_TENANT and kind == FileKind.REGULAR and name == JOURNAL_NAME:
                continue
            elif space.tenant == DEFAULT_TENANT and kind == FileKind.REGULAR and name == REMEMBERED_NAME:
                continue  # the idempotency records: reconciled by the backend once the sessions are loaded
            elif self._repair:  # old index files, a half-written journal, or planted: never read
                self._remove_quietly(os.path.join(index_folder, name), kind)
        folder = str(space.sessions)
        for name, kind in self._entries(space.sessions):
            size = self._recover_file(space, folder, name, kind, chains, cuts, report)
            report.files += 1
            if progress is not None:
                progress(size)

    def _recover_file(
        self,
        space: Space,
        folder: str,
        name: str,
        kind: str,
        chains: dict[SessionKey, Chain],
        cuts: set[str],
        report: RecoveryReport,
    ) -> int:
        """Recover one entry of ``sessions/``; return how many bytes it held."""
        path = f"{folder}/{name}"  # a listed name: no separator in it
        session_id = name[: -len(LOG_SUFFIX)] if name.endswith(LOG_SUFFIX) else name
        key = SessionKey(space.tenant, session_id)
        valid_name = name.endswith(LOG_SUFFIX) and ID_PATTERN.fullmatch(session_id) is not None

        def corrupt(reason: str, created_at: int | None = None, *, names_session: bool = True) -> None:
            report.corrupt.append(CorruptEntry(session_id, path, reason, space.tenant))
            if names_session:
                report.quarantined.append((key, reason, created_at))

        if kind != FileKind.REGULAR:
            reason = f"{kind}, never followed or opened" if kind == FileKind.SYMLINK else kind
            logger.error("%s in %s is %s; it is kept out of service", name, space.sessions, reason)
            corrupt(reason, names_session=valid_name)
            return 0
        if not valid_name:
            corrupt("the file name is not <valid id>.jsonl", names_session=False)
            return 0
        try:
            data = self._read_regular(path)
        except FileNotFoundError:
            return 0  # removed since it was listed (verify runs beside a service): not a session any more
        except OSError as exc:
            corrupt(f"unreadable: {exc.strerror}")
            return 0
        try:
            if session_id in cuts:
                data = self._apply_cut(session_id, path, os.path.join(space.index, f"{session_id}{CUT_SUFFIX}"), data)
            # (looked up, not popped: the chains are freed all at once after the start, so that what a start keeps
            # is not spread over memory the chains held)
            recovered = recover_log(session_id, data, now=self._now, chain=chains.get(key))
        except CorruptLog as exc:
            logger.error("session %s is corrupt and kept out of service: %s", session_id, exc.reason)
            corrupt(exc.reason, exc.created_at)
            return len(data)
        if recovered.torn_bytes:
            logger.warning("session %s: dropped a torn last line of %d bytes", session_id, recovered.torn_bytes)
            if self._repair:
                try:
                    self._truncate(path, recovered.committed_bytes)
                except OSError as exc:  # appending after the torn bytes would damage the log: keep it out
                    reason = f"a torn last line could not be cut away: {exc.strerror}"
                    logger.error("session %s is kept out of service: %s", session_id, reason)
                    corrupt(reason, recovered.header.created_at)
                    return len(data)
        if self._keep:
            report.sessions.append(
                LiveSession(key, recovered.header, recovered.log, checkpointed=recovered.checkpointed)
            )
        report.events += recovered.events
        report.checked_events += recovered.checked_events
        if recovered.checked_events:
            report.checked[key] = recovered.checked_events
        report.bytes += len(data)
        return len(data)

    def _read_regular(self, path: str) -> bytes:
        ops = self._ops
        fd = ops.open(path, os.O_RDONLY)
        try:
            status = ops.fstat(fd)
            if status.st_mode & 0o170000 != 0o100000:  # replaced since it was listed
                raise OSError(errno.EINVAL, "not a regular file")
            data = ops.pread(fd, status.st_size, 0)
            if len(data) < status.st_size:  # cut short meanwhile (a service beside verify): read what is there
                data += ops.read_all(fd)[len(data) :]
            return data
        finally:
            ops.close(fd)

    def _truncate(self, path: str, size: int) -> None:
        fd = self._ops.open(path, os.O_WRONLY)
        try:
            self._ops.ftruncate(fd, size)
            if self._sync:
                self._ops.fsync(fd)
        finally:
            self._ops.close(fd)

    def _apply_cut(self, session_id: str, path: str, record: str, data: bytes) -> bytes:
        """``data`` without the refused bytes a cut record names (when it is this incarnation's); with ``repair``
        the file is cut too and the record dropped. CorruptLog when the cut cannot be made."""
        cut = self._cuts.read(Path(record))
        if cut is None:
            return data
        try:
            instance: str | None = parse_header(data, session_id).instance
        except CorruptLog:
            instance = None
        if instance == cut.instance and len(data) > cut.size:
            if self._repair:
                try:
                    self._truncate(path, cut.size)
                except OSError as exc:
                    raise CorruptLog(
                        f"bytes after byte {cut.size} were refused and could not be cut away: {exc.strerror}"
                    ) from None
                logger.warning("session %s: cut away %d refused bytes", session_id, len(data) - cut.size)
            data = data[: cut.size]
        if self._repair:
            try:
                self._cuts.clear(Path(record))
            except OSError as exc:  # the cut is made; the record applies again (harmlessly) at the next start
                logger.warning("could not remove the cut record of session %s: %s", session_id, exc.strerror)
        return data

    def _remove_quietly(self, path: str, kind: str) -> None:
        """Remove a leftover; a folder goes with what it holds, a link goes alone (never followed)."""
        try:
            if kind == FileKind.DIRECTORY:
                self._ops.rmtree(path)
            else:
                self._ops.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            logger.warning("could not remove the leftover %s: %s", path, exc.strerror)
