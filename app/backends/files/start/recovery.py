"""Rebuilding sessions from the bytes of their JSONL files (spec section 4, "Recovery").

Only a final fragment without a trailing newline is torn (never acknowledged) and dropped. Any other damage makes
the session corrupt: its file is left untouched and the session is kept out of service. Nothing is followed out of
the data directory: an entry of ``sessions/`` that is a symlink, or anything but a regular file, is never opened.

:class:`Recovery` reads a whole data directory. With ``repair`` (a start) it also empties ``tmp/``, applies cut
records, truncates torn tails and removes stale index files; without it (``verify``) it changes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.backends.base import CorruptEntry
from app.backends.catalog import LiveSession
from app.backends.files.appends.cuts import CUT_SUFFIX, CutRecords
from app.backends.files.archive_journal import JOURNAL_NAME as ARCHIVED_NAME
from app.backends.files.checkpoints.journal import JOURNAL_NAME, Journal
from app.backends.files.checkpoints.records import RecordChain, decode_record, read_chains
from app.backends.files.disk.datadir import DataDir, Space
from app.backends.files.disk.encoding import Encoding
from app.backends.files.disk.fileops import FileKind, FileOps
from app.backends.files.frames.file_text import decode_file
from app.backends.files.frames.index import FrameIndex
from app.backends.files.idempotency_journal import JOURNAL_NAME as REMEMBERED_NAME
from app.backends.files.start.log_check import CorruptLog, RecoveredLog, parse_header, recover_log, salvage_log
from app.backends.files.start.parallel_checks import START_BYTES, FullChecks, Verdict, worker_count
from app.backends.log_parts import resume_log
from app.domain.dsh_frames import MAGIC, DamagedFrames, is_zstd
from app.domain.ids import ID_PATTERN
from app.domain.session import DEFAULT_TENANT, SessionKey

__all__ = [
    "CorruptLog",
    "RecoveredLog",
    "Recovery",
    "RecoveryReport",
    "RecoveryStopped",
    "parse_header",
    "recover_log",
    "salvage_log",
]

logger = logging.getLogger("forklog.storage")

# -- a whole data directory ------------------------------------------------------------------------------------------


class RecoveryStopped(Exception):
    """:meth:`Recovery.stop` was called: the files after the one being read were left as they were. A signal within
    the start's thread (not an error of the tree): only a store closed while it opens raises it."""


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

    parallel_files: int = 0  # of the files, those checked by worker processes

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
        workers: int | None = None,
        parallel_bytes: int = START_BYTES,
    ):
        self._datadir = datadir
        self._ops = ops
        self._cuts = cuts
        self._now = now
        self._repair = repair
        self._sync = sync
        self._journal = journal
        self._keep = keep
        self._workers = worker_count() if workers is None else workers
        self._parallel_bytes = parallel_bytes
        self._checks: FullChecks[_Held] | None = None
        # Records of whole logs the workers checked, with their sessions, not in the journal yet.
        self._records: list[tuple[LiveSession, bytes]] = []
        self._records_bytes = 0
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Make :meth:`run` (in another thread) stop after the file it is reading, with :class:`RecoveryStopped`,
        writing nothing more (a service stopped during a long start closes its store only once this has)."""
        self._stopping.set()

    def run(self, progress: Callable[[int], None] | None = None) -> RecoveryReport:
        """Recover every session; ``progress(bytes)`` is called after each file."""
        if self._repair:
            for name, kind in self._entries(self._datadir.tmp):
                # A create or delete that crashed half-way: the file was never linked in, or was already unlinked.
                self._remove_quietly(os.path.join(self._datadir.tmp, name), kind)
        chains = read_chains(self._journal.read()) if self._journal is not None else {}
        report = RecoveryReport()
        checks = self._checks = FullChecks(now=self._now, workers=self._workers, start_bytes=self._parallel_bytes)
        try:
            spaces = [(space, self._entries(space.sessions)) for space in self._datadir.spaces()]
            if self._workers >= 2:  # (a file's size costs a system call: asked only where workers may start)
                checks.expect(self._unchained_bytes(spaces, chains, enough=self._parallel_bytes))
            for space, entries in spaces:
                self._recover_space(space, entries, chains, report, progress)
            for held, verdict in checks.drain():
                self._stop_if_asked()
                self._settle_checked(held, verdict, report)
        finally:
            checks.close()
        self._write_records(report)
        report.parallel_files = checks.files
        return report

    def _stop_if_asked(self) -> None:
        if self._stopping.is_set():
            raise RecoveryStopped("the start was stopped while its files were read")

    def count_files(self) -> int:
        """How many entries the sessions folders hold (for a progress bar)."""
        return sum(len(self._entries(space.sessions)) for space in self._datadir.spaces())

    def _entries(self, folder: Path | str) -> list[tuple[str, str]]:
        try:
            return self._ops.scandir(folder)
        except FileNotFoundError:  # a folder verify found missing (a start makes every folder first)
            return []

    def _unchained_bytes(
        self, spaces: list[tuple[Space, list[tuple[str, str]]]], chains: dict[SessionKey, RecordChain], *, enough: int
    ) -> int:
        """The bytes of the session files no checkpoint chain names, counted up to ``enough``: each of them is
        checked whole (so are files whose chain no longer fits them, found only as they are read)."""
        total = 0
        for space, entries in spaces:
            for name, kind in entries:
                if kind != FileKind.REGULAR or not name.endswith(space.suffix):
                    continue
                if SessionKey(space.tenant, name[: -len(space.suffix)]) in chains:
                    continue
                try:
                    total += self._ops.lstat(os.path.join(space.sessions, name)).st_size
                except OSError:  # gone, or unreadable: the file's own turn says so
                    continue
                if total >= enough:
                    return total
        return total

    def _recover_space(
        self,
        space: Space,
        entries: list[tuple[str, str]],
        chains: dict[SessionKey, RecordChain],
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
            elif space.tenant == DEFAULT_TENANT and kind == FileKind.REGULAR and name == ARCHIVED_NAME:
                continue  # which sessions are archived: applied by the backend once the sessions are loaded
            elif self._repair:  # old index files, a half-written journal, or planted: never read
                self._remove_quietly(os.path.join(index_folder, name), kind)
        folder = str(space.sessions)
        names = {name for name, _ in entries}
        for name, kind in entries:
            self._stop_if_asked()
            size = self._recover_file(space, folder, name, kind, chains, cuts, report, names)
            report.files += 1
            if progress is not None:
                progress(size)

    def _recover_file(
        self,
        space: Space,
        folder: str,
        name: str,
        kind: str,
        chains: dict[SessionKey, RecordChain],
        cuts: set[str],
        report: RecoveryReport,
        names: set[str],
    ) -> int:
        """Recover one entry of ``sessions/``; return how many bytes it held."""
        path = f"{folder}/{name}"  # a listed name: no separator in it
        encoding = self._datadir.encoding
        suffix, other = space.suffix, encoding.other
        own = name.endswith(suffix)
        # (".jsonl" ends neither name of the zstd encoding, and ".jsonl.zstd" does not end in ".jsonl")
        foreign = not own and name.endswith(other.suffix)
        session_id = name[: -len(suffix)] if own else name[: -len(other.suffix)] if foreign else name
        key = SessionKey(space.tenant, session_id)
        valid_name = own and ID_PATTERN.fullmatch(session_id) is not None

        def corrupt(reason: str, created_at: int | None = None, *, names_session: bool = True) -> None:
            report.corrupt.append(CorruptEntry(session_id, path, reason, space.tenant))
            if names_session:
                report.quarantined.append((key, reason, created_at))

        if kind != FileKind.REGULAR:
            reason = f"{kind}, never followed or opened" if kind == FileKind.SYMLINK else kind
            logger.error("%s in %s is %s; it is kept out of service", name, space.sessions, reason)
            corrupt(reason, names_session=valid_name)
            return 0
        if foreign and ID_PATTERN.fullmatch(session_id) is not None:
            # A file of the other encoding names the session too, unless the session has its own file.
            corrupt(
                f"a {other.suffix} file (the {other.value!r} encoding) in a data directory of the "
                f"{encoding.value!r} encoding: convert it with forklog copy, or import it",
                names_session=f"{session_id}{suffix}" not in names,
            )
            return 0
        if not valid_name:
            corrupt(f"the file name is not <valid id>{suffix}", names_session=False)
            return 0
        try:
            data, changed_at = self._read_regular(path)
        except FileNotFoundError:
            return 0  # removed since it was listed (verify runs beside a service): not a session any more
        except OSError as exc:
            corrupt(f"unreadable: {exc.strerror}")
            return 0
        try:
            if session_id in cuts:
                cut_record = os.path.join(space.index, f"{session_id}{CUT_SUFFIX}")
                data = self._apply_cut(session_id, path, cut_record, data, changed_at)
        except CorruptLog as exc:
            logger.error("session %s is corrupt and kept out of service: %s", session_id, exc.reason)
            corrupt(exc.reason, exc.created_at)
            return len(data)
        size = len(data)
        frames: FrameIndex | None = None
        torn_at: int | None = None
        if encoding is Encoding.ZSTD:
            if data and not (is_zstd(data) or MAGIC.startswith(data)):
                corrupt(f"holds raw JSONL (the 'none' encoding), not the zstd frames of a {suffix} file")
                return size
            try:
                decoded = decode_file(data)
            except DamagedFrames as exc:
                logger.error("session %s is corrupt and kept out of service: %s", session_id, exc)
                corrupt(f"damaged zstd frames: {exc}")
                return size
            data, frames, torn_at = decoded.text, decoded.frames, decoded.torn_at
            if frames is None:
                frames = FrameIndex(0)
        elif is_zstd(data):
            corrupt(f"holds zstd frames (the 'zstd' encoding), not the raw JSONL of a {suffix} file")
            return size
        # (looked up, not popped: the chains are freed all at once after the start, so that what a start keeps is
        # not spread over memory the chains held)
        chain = chains.get(key)
        held = _Held(space, path, key, data, changed_at, frames, torn_at)
        if self._checks is not None and _checked_whole(data, session_id, chain):
            task = (space.tenant, session_id, path, size)
            for earlier, verdict in self._checks.add(task, held):
                self._settle_checked(earlier, verdict, report)
            return size
        self._check_here(held, chain, report)
        return size

    def _check_here(
        self, held: _Held, chain: RecordChain | None, report: RecoveryReport, *, record: bytes | None = None
    ) -> None:
        """Check a file in this process, resuming from its ``chain`` if the file still holds what it covers
        (``record``: the chain is a worker's check of the whole file)."""
        try:
            recovered = recover_log(held.key.id, held.data, now=self._now, chain=chain)
        except CorruptLog as exc:
            self._corrupt(held, report, exc.reason, exc.created_at)
            return
        self._settle(held, recovered, report, record=record)

    def _settle_checked(self, held: _Held, verdict: Verdict | None, report: RecoveryReport) -> None:
        """A file a worker checked: its damage, or its log resumed from the record of its check."""
        if verdict is None:  # never sent to a worker
            self._check_here(held, None, report)
            return
        record, lines, reason, created_at = verdict
        if reason is not None:
            self._corrupt(held, report, reason, created_at)
            return
        assert record is not None
        try:
            chain = RecordChain(decode_record(record))
            if lines is not None:  # the log's lines are not the file's own: kept as checked, never checkpointed
                header = parse_header(held.data, held.key.id)
                committed = held.data.rfind(b"\n") + 1
                log = resume_log(lines, chain.parts())
                recovered = RecoveredLog(
                    header,
                    log,
                    committed,
                    len(held.data) - committed,
                    events=len(log),
                    checked_events=len(log),
                    checkpointed=-1,
                )
                self._settle(held, recovered, report)
                return
        except (ValueError, CorruptLog):  # a verdict that does not fit (never expected): the long way
            self._check_here(held, None, report)
            return
        # Resumed as after a clean stop; the record's digests are compared with the bytes read here (a file that
        # changed in between is checked again, here).
        self._check_here(held, chain, report, record=record)

    def _corrupt(self, held: _Held, report: RecoveryReport, reason: str, created_at: int | None) -> None:
        session_id = held.key.id
        logger.error("session %s is corrupt and kept out of service: %s", session_id, reason)
        report.corrupt.append(CorruptEntry(session_id, held.path, reason, held.key.tenant))
        report.quarantined.append((held.key, reason, created_at))

    def _settle(
        self, held: _Held, recovered: RecoveredLog, report: RecoveryReport, *, record: bytes | None = None
    ) -> None:
        """Keep a recovered session (its torn tail cut away first)."""
        key, path = held.key, held.path
        if held.torn_at is not None:
            logger.warning("session %s: dropped a torn final zstd frame at byte %d", key.id, held.torn_at)
            if self._repair:
                try:
                    self._truncate(path, held.torn_at, held.changed_at)
                except OSError as exc:  # appending after the torn frame would damage the log: keep it out
                    self._corrupt(
                        held,
                        report,
                        f"a torn final frame could not be cut away: {exc.strerror}",
                        recovered.header.created_at,
                    )
                    return
        if recovered.torn_bytes:
            logger.warning("session %s: dropped a torn last line of %d bytes", key.id, recovered.torn_bytes)
            if self._repair:
                try:
                    self._truncate(path, recovered.committed_bytes, held.changed_at)
                except OSError as exc:  # appending after the torn bytes would damage the log: keep it out
                    self._corrupt(
                        held,
                        report,
                        f"a torn last line could not be cut away: {exc.strerror}",
                        recovered.header.created_at,
                    )
                    return
        checked = recovered.checked_events
        whole = record is not None and checked == 0 and recovered.checkpointed == recovered.events
        if record is not None:
            checked = recovered.events  # by a worker (and, if the file changed since, here again)
        report.events += recovered.events
        report.checked_events += checked
        report.bytes += len(held.data)
        live = None
        if self._keep:
            live = LiveSession(
                key,
                recovered.header,
                recovered.log,
                changed_at=held.changed_at,
                checkpointed=recovered.checkpointed,
            )
            report.sessions.append(live)
        if live is not None and whole and record is not None and self._repair and self._journal is not None:
            self._keep_record(live, record, report)
        elif checked:
            report.checked[key] = checked

    def _keep_record(self, live: LiveSession, record: bytes, report: RecoveryReport) -> None:
        """The record of a worker's check goes to the journal (in rounds of a few MB, each synced)."""
        self._records.append((live, record))
        self._records_bytes += len(record)
        if self._records_bytes >= RECORD_ROUND_BYTES:
            self._write_records(report)

    def _write_records(self, report: RecoveryReport) -> None:
        """Append the kept records to the journal: what the workers checked is not checked again after a crash. If
        the disk refuses, those sessions are left to the checkpoint rounds (as if nothing covered them)."""
        records, self._records, self._records_bytes = self._records, [], 0
        if not records or self._journal is None:
            return
        try:
            self._journal.append([[record] for _, record in records])
        except OSError as exc:
            logger.warning("could not write %d checkpoints (the rounds write them): %s", len(records), exc.strerror)
            for live, _ in records:
                live.checkpointed = 0
                report.checked[live.key] = len(live.log)

    def _read_regular(self, path: str) -> tuple[bytes, int]:
        """The file's bytes, and when its last change was acknowledged (epoch ms): its mtime. Every change the
        service makes to a session file writes it just before the change is acknowledged (the create's or fork's
        temp file, each append), and nothing else the service does writes to it but to cut away bytes never
        acknowledged; so the mtime is the server's clock at the session's last change, and (unlike the events'
        ``time``) no client sets it."""
        ops = self._ops
        fd = ops.open(path, os.O_RDONLY)
        try:
            status = ops.fstat(fd)
            if status.st_mode & 0o170000 != 0o100000:  # replaced since it was listed
                raise OSError(errno.EINVAL, "not a regular file")
            data = ops.pread(fd, status.st_size, 0)
            if len(data) < status.st_size:  # cut short meanwhile (a service beside verify): read what is there
                data += ops.read_all(fd)[len(data) :]
            return data, status.st_mtime_ns // 1_000_000
        finally:
            ops.close(fd)

    def _truncate(self, path: str, size: int, changed_at: int) -> None:
        """Cut the file to ``size`` bytes, its mtime kept at ``changed_at``: what is cut was never acknowledged, so
        the session's last change stays when it was (retention counts from it, at every later start too)."""
        fd = self._ops.open(path, os.O_WRONLY)
        try:
            self._ops.ftruncate(fd, size)
            with contextlib.suppress(OSError):  # then a later start counts from this cut: later, never sooner
                self._ops.set_mtime(fd, changed_at * 1_000_000)
            if self._sync:
                self._ops.fsync(fd)
        finally:
            self._ops.close(fd)

    def _apply_cut(self, session_id: str, path: str, record: str, data: bytes, changed_at: int) -> bytes:
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
                    self._truncate(path, cut.size, changed_at)
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


# The records of the workers' checks are appended to the journal once they add up to this many bytes.
RECORD_ROUND_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Held:
    """A file read, waiting for its check."""

    space: Space
    path: str
    key: SessionKey
    data: bytes  # a compressed file's text
    changed_at: int  # epoch ms: the file's mtime when it was read
    frames: FrameIndex | None = None  # a compressed file's frames
    torn_at: int | None = None  # where a compressed file's torn final frame starts


def _checked_whole(data: bytes, session_id: str, chain: RecordChain | None) -> bool:
    """Whether a file's every event is to be checked: no checkpoint of its incarnation (a header that does not
    parse is left to the check in this process, which says why)."""
    if chain is None:
        return True
    try:
        return parse_header(data, session_id).instance != chain.instance
    except CorruptLog:
        return False
