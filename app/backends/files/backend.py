"""The durable file backend: one DSH-format JSONL file per session in a data directory (spec section 4).

Every log is also held in this process's memory (reads never touch the disk); every change is written and synced
before it is acknowledged, and only then made visible in memory. One process owns a data directory at a time.
While it runs, every session's checked prefix is kept current in the checkpoint journal, in the background
(:mod:`app.backends.files.checkpoints.keeper`), so that a start after a crash checks only what came after it.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import contextlib
import functools
import gc
import logging
import os
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.backends.base import (
    Capabilities,
    ChangeListener,
    CorruptEntry,
    IdempotencyRecord,
    Readiness,
    Remember,
    Seed,
    SeedPrefix,
)
from app.backends.catalog import Catalog, LiveSession
from app.backends.catalog_reads import CatalogReads, readiness_of, starting_log
from app.backends.errors import Access, StorageUnavailable
from app.backends.files.appends.cuts import CUT_SUFFIX, CutRecords
from app.backends.files.appends.writer import OPEN_FILES, AppendWriter
from app.backends.files.archive_journal import ArchiveJournal, apply_archived
from app.backends.files.checkpoints.journal import JOURNAL_NAME, Journal
from app.backends.files.checkpoints.keeper import REWRITE_MIN_BYTES, Checkpointer
from app.backends.files.disk.datadir import DataDir
from app.backends.files.disk.encoding import Encoding
from app.backends.files.disk.errors import disk_errors
from app.backends.files.disk.fileops import FileOps, release_free_memory
from app.backends.files.frames.compaction import compaction_run, copy_range, rewrite
from app.backends.files.frames.index import FrameIndex, index_of
from app.backends.files.idempotency_journal import IdempotencyJournal, lines_digest
from app.backends.files.start.parallel_checks import START_BYTES as PARALLEL_CHECK_BYTES
from app.backends.files.start.recovery import CorruptLog, Recovery, RecoveryReport, parse_header
from app.backends.observer import StorageObserver
from app.backends.search.sqlite_index import SqliteSearchEngine
from app.domain.dsh_frames import FRAME_TEXT_BOUND, DamagedFrames, decompress_frame, encode_frame, encode_frames
from app.domain.dsh_records import encode_header
from app.domain.errors import SessionAlreadyExists
from app.domain.log import SessionLog
from app.domain.session import Session, SessionHeader, SessionKey, head_of
from app.domain.staging import StagedEvents

__all__ = ["FileBackend"]

logger = logging.getLogger("forklog.storage")

# Idempotency records older than this are dropped at a start (the service sweeps them meanwhile): spec 8's 24 hours.
KEEP_REMEMBERED_MS = 24 * 60 * 60 * 1000

# A fork's source's header line is found within this many bytes of its file (else its lines are written from memory).
HEADER_PROBE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class _BodyCopy:
    """Where a fork's lines are copied from: the first ``size`` bytes after the header of ``path``, if its header
    still names the incarnation ``instance`` of ``source_id``; the fork's own events (``then``) follow them.

    From a compressed file (``frames``, the source's index), ``size`` bytes of its first whole frames are copied as
    they are stored, and ``then`` holds the lines after them: the rest of the frame the boundary falls in, then the
    fork's own events (re-encoded)."""

    path: Path
    source_id: str
    instance: str
    size: int
    then: bytes = b""
    frames: FrameIndex | None = None
    whole_frames: int = 0


# The name of a request's wait for its durable write, in its trace.
SYNC_SPAN = "forklog.storage.sync"

# How often the checkpoint journal is brought up to date while the service runs.
CHECKPOINT_SECONDS = 1.0


class FileBackend(CatalogReads):
    """Sessions in ``data_dir``; the process holds the directory's lock from construction to :meth:`close`.

    ``ops`` is the door to the operating system (tests pass a :class:`FileOps` that injects faults).
    ``checkpoint_interval`` is how often (seconds) checkpoints are written in the background; None writes them only
    at a clean shutdown and when :meth:`checkpoint` is called. The checkpoint journal is rewritten once it is three
    times its size after the last rewrite and larger than ``journal_rewrite_bytes``. Files no checkpoint covers
    are checked by ``check_workers`` processes (default: one per core) once they add up to ``parallel_check_bytes``
    (:mod:`app.backends.files.start.parallel_checks`). ``compression`` is the encoding asked for (spec 16; None:
    the data directory's own, ``zstd`` for a new one).
    """

    name = "files"

    def __init__(
        self,
        data_dir: Path | str,
        *,
        clock: Callable[[], int],
        sync: bool = True,
        ops: FileOps | None = None,
        checkpoint_interval: float | None = CHECKPOINT_SECONDS,
        journal_rewrite_bytes: int = REWRITE_MIN_BYTES,
        check_workers: int | None = None,
        parallel_check_bytes: int = PARALLEL_CHECK_BYTES,
        compression: Encoding | str | None = None,
    ) -> None:
        self.ops = ops if ops is not None else FileOps()
        self._clock = clock
        self._sync = sync
        self.datadir = DataDir(data_dir, self.ops, sync=sync, compression=compression)
        self.compressed = self.datadir.encoding is Encoding.ZSTD
        # A compressed session's file is rewritten by its compaction: its fork's copy and its delete wait for it.
        self._held: dict[SessionKey, asyncio.Lock] = {}
        self.datadir.lock()
        self.catalog = Catalog(clock)
        self.remembered = IdempotencyJournal(self.datadir.root / "index", self.ops, sync=sync)
        self.archived = ArchiveJournal(self.datadir.root / "index", self.ops, sync=sync)
        self._cuts = CutRecords(self.ops, sync=sync)
        self._writer = AppendWriter(self.ops, self._cuts, sync=sync, folder=self.datadir.root)
        # The paths an append names, made once for the sessions in use (two Path objects an append otherwise).
        self._append_paths = functools.lru_cache(maxsize=OPEN_FILES)(self._paths_of)
        self._corrupt: list[CorruptEntry] = []
        self.journal = Journal(self.datadir.root / "index" / JOURNAL_NAME, self.ops, sync=sync)
        self._checkpoint_interval = checkpoint_interval
        self._journal_rewrite_bytes = journal_rewrite_bytes
        self._check_workers = check_workers
        self._parallel_check_bytes = parallel_check_bytes
        self._checkpointer: Checkpointer | None = None
        self._recovery: Recovery | None = None  # the start's reading of the files (begin_opening)
        self._recovering: concurrent.futures.Future[RecoveryReport] | None = None
        self._collecting = True  # whether the collector ran before the files were read
        self.recovery = RecoveryReport()  # what the start found (filled by open)
        self._opened = False
        self._closed = False

    @property
    def data_dir(self) -> Path:
        return self.datadir.root

    @functools.cached_property  # one object for the life of the backend, looked at on every fork and delete
    def capabilities(self) -> Capabilities:
        return Capabilities(counts_locally=self, search_engine=self.search_engine, begin_opening=self.begin_opening)

    def search_engine(self) -> SqliteSearchEngine:
        """The search index lives beside the files: FTS5 in ``search/search.sqlite3`` of the data directory."""
        return SqliteSearchEngine(self.data_dir / "search" / "search.sqlite3")

    @property
    def observer(self) -> StorageObserver:
        """Told of every append round's events and time, and of each request's wait for its sync."""
        return self._writer.observer

    @observer.setter
    def observer(self, observer: StorageObserver) -> None:
        self._writer.observer = observer

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def begin_opening(self) -> None:
        """Start reading the files now, in a thread of their own, rather than when :meth:`open` is awaited: a
        service starting imports and builds the rest of itself meanwhile (on another core, while the checks of a
        cold start keep the others busy). :meth:`open` takes up what this began; a second call does nothing."""
        if self._recovering is not None:
            return
        recovery = self._recovery = Recovery(
            self.datadir,
            self.ops,
            self._cuts,
            now=self._clock(),
            repair=True,
            sync=self._sync,
            journal=self.journal,
            workers=self._check_workers,
            parallel_bytes=self._parallel_check_bytes,
        )
        # Recovery makes many objects that live as long as the process: collecting while it runs only walks them
        # again and again. After it, they are moved out of the collector's sight (gc.freeze, in open).
        self._collecting = gc.isenabled()
        gc.disable()
        recovering = self._recovering = concurrent.futures.Future()

        def read_the_files() -> None:
            if not recovering.set_running_or_notify_cancel():
                return  # open() was cancelled before this thread began: nothing is read
            try:
                recovering.set_result(recovery.run())
            except BaseException as exc:  # handed to open(), which raises it
                recovering.set_exception(exc)

        # (a daemon: a start that is refused while the files are read exits without waiting for them)
        threading.Thread(target=read_the_files, name="forklog-recovery", daemon=True).start()

    async def open(self) -> None:
        self._writer.prepare()  # the sync process starts while the files are read, not at the first append
        self.begin_opening()
        assert self._recovering is not None
        try:
            report = await asyncio.wrap_future(self._recovering)
            self.catalog.load(report.sessions)
        finally:
            if self._collecting:
                gc.enable()
        gc.freeze()
        release_free_memory()
        for key, reason, created_at in report.quarantined:
            self.catalog.quarantine(key, reason, created_at=created_at)
        self._corrupt = report.corrupt
        checkpointer = self._checkpointer = Checkpointer(
            self.journal,
            self.catalog,
            interval=self._checkpoint_interval,
            rewrite_min_bytes=self._journal_rewrite_bytes,
        )
        for live in report.sessions:
            if live.key in report.checked:
                checkpointer.touch(live)  # checked now: its record spares the next start that work
        report.sessions = []  # the catalog holds them now
        # Before the service is ready: a crash at any moment after it restarts from these records, not by checking
        # every event again (after files no checkpoint covers, that is the whole store).
        await checkpointer.checkpoint_quietly()
        self.recovery = report
        await asyncio.to_thread(self._load_archived)
        await asyncio.to_thread(
            self.remembered.reconcile, self._change_is_there, expired_before=self._clock() - KEEP_REMEMBERED_MS
        )
        logger.info(
            "recovered %d sessions (%d events, %d of them checked, %d bytes), %d kept out of service",
            len(self.catalog),
            report.events,
            report.checked_events,
            report.bytes,
            len(report.corrupt),
        )
        self._opened = True
        checkpointer.start()

    def _load_archived(self) -> None:
        """Mark the sessions the archive journal names archived; fold the journal if it holds anything else."""
        named = self.archived.load()
        kept = apply_archived(self.catalog, named)
        if kept != named or not self.archived.folded:
            self.archived.rewrite(kept.items())

    def _change_is_there(self, record: IdempotencyRecord, digest: str | None) -> bool:
        """Whether a record's change was made: its session, that incarnation, holding its events byte for byte."""
        live = self.catalog.get(SessionKey(record.tenant, record.session))
        if live is None or live.header.instance != record.instance or len(live.log) < record.end_seq:
            return False
        return digest is None or lines_digest(live.log.lines(record.first_seq, record.end_seq)) == digest

    @property
    def corrupt(self) -> list[CorruptEntry]:
        """The stored sessions the last start kept out of service."""
        return list(self._corrupt)

    async def checkpoint(self) -> None:
        """Write every session's checkpoint now (the background rounds do it every ``checkpoint_interval``)."""
        if self._checkpointer is not None:
            await self._checkpointer.checkpoint()

    @property
    def checkpointer(self) -> Checkpointer | None:
        return self._checkpointer

    async def close(self, *, checkpoint: bool = True) -> None:
        """At a clean shutdown: write the last checkpoints, then release the directory. ``checkpoint=False`` leaves
        what a crash leaves (the checkpoints of the last round)."""
        if self._closed:
            return
        self._closed = True
        recovering = self._recovering
        if recovering is not None and not recovering.done():
            # A start stopped while its files are read (a SIGTERM during a long cold start): nothing is written to,
            # or unlocked under, the thread still reading them; it stops after its file.
            assert self._recovery is not None
            self._recovery.stop()
            await asyncio.to_thread(concurrent.futures.wait, [recovering])
        try:
            if self._checkpointer is not None:
                await self._checkpointer.close(flush=checkpoint)
        finally:
            await self._writer.close()
            self.journal.close()
            self.archived.close()
            self.datadir.unlock()

    async def readiness(self, tenant: str | None = None) -> Readiness:
        return readiness_of(self.catalog, self._corrupt, tenant)

    def listen(self, listener: ChangeListener) -> None:
        return None  # one process owns the directory: every change is this process's own

    # -- create ----------------------------------------------------------------------------------------------------

    async def create(
        self, key: SessionKey, instance: str, lineage: Mapping[str, Any], seed: Seed, remember: Remember | None = None
    ) -> Session:
        log = starting_log(self.catalog, key, seed)
        copy_from = None
        held = None
        if isinstance(seed, SeedPrefix) and seed.count:
            source = self.catalog.get(seed.source)
            if source is not None and source.checkpointed >= 0:  # its file holds the log's bytes: copy them there
                size = log.offset(seed.count)
                path = self.datadir.log_path(seed.source)
                if not self.compressed:
                    copy_from = _BodyCopy(path, seed.source.id, seed.instance, size, log.lines(seed.count))
                else:
                    held = self._held_lock(seed.source)
                    await held.acquire()  # the source's frames stay where its index says while they are copied
                    frames = await self._known_frames(source, path)
                    if frames is not None:
                        copy_from = _frame_copy(path, seed.source.id, seed.instance, frames, log, seed.count)
        try:
            header = self.catalog.new_header(key, instance, lineage)
            made = Session(key, header, head_of(log.state), self.catalog.now())
            records = [remember(made)] if remember is not None else []
            self.remembered.check_free(records)
            return await self._make(key, header, log, [(record, None) for record in records], copy_from)
        finally:
            if held is not None:
                held.release()

    async def restore(self, key: SessionKey, header: SessionHeader, log: SessionLog) -> Session:
        if self.catalog.get(key) is not None:
            raise SessionAlreadyExists(key.id)
        if header.archived:  # first: a line of an incarnation that is never made applies to nothing
            await self._write_archived(key, header.instance, True)
        return await self._make(key, header, log, [])

    # -- archive (app/backends/files/archive_journal.py) -------------------------------------------------------------

    async def set_archived(
        self, key: SessionKey, instance: str, archived: bool, expected_count: int | None = None
    ) -> Session | None:
        live = self.catalog.incarnation(key, instance, expected_count)
        if live is None:
            return None
        if live.header.archived != archived:
            await self._write_archived(key, instance, archived)
            self.catalog.set_archived(live, archived)
        return live.view()

    async def _write_archived(self, key: SessionKey, instance: str, archived: bool) -> None:
        with (
            disk_errors(Access.CHANGE, f"archive session {key.id!r}"),
            self._writer.observer.durable_write(SYNC_SPAN, 0),
        ):
            await asyncio.to_thread(self.archived.write, key, instance, archived)

    async def _make(
        self,
        key: SessionKey,
        header: SessionHeader,
        log: SessionLog,
        records: list[tuple[IdempotencyRecord, str | None]],
        copy_from: _BodyCopy | None = None,
    ) -> Session:
        placed = await self._write_records(records)
        body = log.body_pieces()  # the new session is not live yet: nothing appends while it is written
        try:
            with (
                disk_errors(Access.CHANGE, f"create session {key.id!r}"),
                self._writer.observer.durable_write(SYNC_SPAN, len(log)),
            ):
                frames = await asyncio.to_thread(self._create_file, key, header, body, copy_from)
        finally:
            for piece in body:
                piece.release()
        # Acknowledged now; a later start reads the same moment off the file's mtime (see Recovery._read_regular).
        live = LiveSession(key, header, log, changed_at=self.catalog.now(), frames=frames)
        self.catalog.add(live)
        self.remembered.keep(placed)
        if self._checkpointer is not None:
            self._checkpointer.touch(live)
        return live.view()

    async def _write_records(self, records: list[tuple[IdempotencyRecord, str | None]]) -> list[Any]:
        """Write (and sync) idempotency records before their change: a change is never durable without its key."""
        if not records:
            return []
        with disk_errors(Access.CHANGE, "keep an idempotency key"):
            return await asyncio.to_thread(self.remembered.write, records)

    def _create_file(
        self, key: SessionKey, header: SessionHeader, lines: Sequence[memoryview], copy_from: _BodyCopy | None
    ) -> FrameIndex | None:
        """Write header + lines to a temp file, sync it, link it in place (never overwriting), sync the folder;
        a compressed file's frames.

        A fork's lines are copied from its source's file in the kernel (``copy_from``) when that file still is the
        source's incarnation; else, or if the copy fails, they are written from memory."""
        ops = self.ops
        final = self.datadir.log_path(key)
        self._writer.forget(final)
        tmp, frames = self._write_temp(key, header, lines, copy_from)
        try:
            try:
                ops.link(tmp, final)
            except FileExistsError:
                raise SessionAlreadyExists(key.id) from None
            if self._sync:
                try:
                    ops.fsync_dir(final.parent)
                except OSError:
                    # Not acknowledged, so not created: the id must be free on disk as it is in memory.
                    with contextlib.suppress(OSError):
                        ops.unlink(final)
                    raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(tmp)
        return frames

    def _write_temp(
        self, key: SessionKey, header: SessionHeader, lines: Sequence[memoryview], copy_from: _BodyCopy | None
    ) -> tuple[Path, FrameIndex | None]:
        """A synced temp file holding header + lines (copied from the fork's source if it can be, else written),
        and a compressed file's frames."""
        header_line = encode_header(header)
        if not self.compressed:
            if copy_from is not None:
                copied = self._temp_file(key, header_line, lambda fd: self._copy_body(fd, copy_from))
                if copied is not None:
                    return copied, None

            def write(fd: int) -> bool:
                for piece in lines:
                    self.ops.write_all(fd, piece)
                return True

            written = self._temp_file(key, header_line, write)
            assert written is not None
            return written, None
        header_frame = encode_frame(header_line)
        frames = FrameIndex(len(header_frame))
        if copy_from is not None and copy_from.frames is not None:
            source_frames = copy_from.frames
            copied = self._temp_file(key, header_frame, lambda fd: self._copy_frames(fd, copy_from))
            if copied is not None:
                frames = source_frames.prefix(len(header_frame), copy_from.whole_frames)
                for frame, size in encode_frames(copy_from.then):
                    frames.add(len(frame), size)
                return copied, frames
        encoded = encode_frames(b"".join(lines))

        def write_frames(fd: int) -> bool:
            for frame, size in encoded:
                self.ops.write_all(fd, frame)
                frames.add(len(frame), size)
            return True

        written = self._temp_file(key, header_frame, write_frames)
        assert written is not None
        return written, frames

    def _temp_file(self, key: SessionKey, header: bytes, write_lines: Callable[[int], bool]) -> Path | None:
        """A synced temp file of the ``header`` line (or frame) and what ``write_lines(fd)`` writes; None (and no
        file) if it says it could not."""
        ops = self.ops
        tmp = self.datadir.tmp / f"{key.id}.{uuid.uuid4().hex[:12]}.tmp"
        fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                ops.write_all(fd, header)
                whole = write_lines(fd)
                if whole and self._sync:
                    ops.fsync(fd)
            finally:
                ops.close(fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(tmp)
            raise
        if not whole:
            with contextlib.suppress(FileNotFoundError):
                ops.unlink(tmp)
            return None
        return tmp

    def _copy_body(self, target: int, copy: _BodyCopy) -> bool:
        """Copy ``copy.size`` bytes of the source's lines into ``target``; False (nothing to trust in ``target``)
        when the source's file is gone, is another incarnation, or the system cannot copy."""
        ops = self.ops
        try:
            source = ops.open(copy.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            head = ops.pread(source, HEADER_PROBE_BYTES, 0)
            end = head.find(b"\n")
            if end < 0:
                return False
            try:
                if parse_header(head[: end + 1], copy.source_id).instance != copy.instance:
                    return False
            except CorruptLog:
                return False
            offset, remaining = end + 1, copy.size
            while remaining:
                copied = ops.copy_file_range(source, target, remaining, offset)
                if copied <= 0:
                    return False  # the source's file is shorter than its log: write the lines from memory
                offset += copied
                remaining -= copied
            if copy.then:  # the fork's own events: the child's file is whole before it is linked in place
                ops.write_all(target, copy.then)
        except OSError:
            return False
        finally:
            ops.close(source)
        return True

    def _copy_frames(self, target: int, copy: _BodyCopy) -> bool:
        """A compressed fork: the source's whole frames before its boundary copied as they are stored, then the
        rest of the boundary's frame and the fork's own events as new frames; False (nothing to trust in
        ``target``) when the source's file is gone, is another incarnation, or the system cannot copy."""
        ops = self.ops
        frames = copy.frames
        assert frames is not None
        try:
            source = ops.open(copy.path, os.O_RDONLY)
        except OSError:
            return False
        try:
            header_frame = ops.pread(source, frames.header_end, 0)
            try:
                header_line = decompress_frame(header_frame)
                if parse_header(header_line, copy.source_id).instance != copy.instance:
                    return False
            except (DamagedFrames, CorruptLog):
                return False
            copy_range(ops, source, target, frames.header_end, copy.size)
            for frame, _ in encode_frames(copy.then):
                ops.write_all(target, frame)
        except OSError:
            return False
        finally:
            ops.close(source)
        return True

    # -- append ----------------------------------------------------------------------------------------------------

    async def append(self, key: SessionKey, staged: StagedEvents, remember: Sequence[IdempotencyRecord] = ()) -> None:
        live = self.catalog.staged_on(key, staged.base_count)
        placed: list[Any] = []
        if remember:  # most appends carry no Idempotency-Key
            self.remembered.check_free(remember)
            placed = await self._write_records([(record, _digest_of(staged, record)) for record in remember])
        events = len(staged.events)
        data = staged.lines
        encoded: list[tuple[bytes, int]] = []
        if self.compressed:  # one frame (or, past the bound, several): a durable batch is whole frames
            if len(data) <= FRAME_TEXT_BOUND:
                encoded = [(encode_frame(data), len(data))]
            else:
                encoded = await asyncio.to_thread(encode_frames, data)
            data = b"".join(frame for frame, _ in encoded) if len(encoded) > 1 else encoded[0][0]
        with (
            disk_errors(Access.CHANGE, f"append to session {key.id!r}"),
            self._writer.observer.durable_write(SYNC_SPAN, events),
        ):
            log_path, cut_record = self._append_paths(key)
            await self._writer.append(
                log_path, data, instance=live.header.instance, cut_record=cut_record, events=events
            )
        live.log.commit(staged)
        if live.frames is not None:
            for frame, size in encoded:
                live.frames.add(len(frame), size)
        self.catalog.touch(live)
        self.remembered.keep(placed)
        if self._checkpointer is not None:
            self._checkpointer.touch(live)
        if staged.turn_ends and self.compressed and live.checkpointed >= 0:
            await self._compact(live, log_path)

    async def _compact(self, live: LiveSession, path: Path) -> None:
        """Rewrite the ended turns' small frames of a compressed session into one (app.backends.files.frames
        .compaction), before the append that ended the turn is answered, so that the bytes at rest are small as
        soon as a turn is; the append is durable already, so a rewrite that fails only leaves the frames as they
        were. Nothing else appends meanwhile (one batch at a time reaches a file); a fork's copy and a delete wait."""
        last_turn_end = live.log.state.last_turn_end_seq
        if last_turn_end is None or not self._writer.is_clean(path):
            return
        held = self._held_lock(live.key)
        async with held:
            if self.catalog.get(live.key) is not live:
                return  # deleted meanwhile
            frames = await self._known_frames(live, path)
            run = None if frames is None else compaction_run(frames, live.log.offset(last_turn_end + 1))
            if frames is None or run is None:
                return
            rewriting = asyncio.ensure_future(asyncio.to_thread(self._rewrite, live, path, frames, run))
            try:
                await asyncio.shield(rewriting)
            except asyncio.CancelledError:  # (at shutdown) the file is not left to the next append half-known
                with contextlib.suppress(BaseException):
                    await rewriting
                raise
            except (OSError, DamagedFrames) as exc:
                logger.warning("could not compact the frames of session %r: %s", live.key.id, exc)
            except Exception:  # never expected; the append it follows is durable and answered as such
                logger.exception("could not compact the frames of session %r", live.key.id)

    def _rewrite(self, live: LiveSession, path: Path, frames: FrameIndex, run: tuple[int, int]) -> None:
        """In a worker thread: the rewrite, then (once the new file is in place) its index, and the writer's
        descriptor of the old file dropped: the next append opens the new one."""
        rewritten = rewrite(self.ops, path, self.datadir.tmp, frames, run, sync=self._sync)
        live.frames = rewritten
        self._writer.forget(path)

    async def _known_frames(self, live: LiveSession, path: Path) -> FrameIndex | None:
        """The index of a compressed session's frames, read off its file the first time it is needed (a start
        keeps none: an idle session costs nothing); None when the file does not hold the log's bytes as they are.
        Called while nothing appends to the session."""
        if live.frames is None and self.compressed and live.checkpointed >= 0:
            try:
                data = await asyncio.to_thread(self._read_file, path)
            except OSError:
                return None
            live.frames = index_of(data, live.log.byte_size)
        frames: FrameIndex | None = live.frames
        return frames

    def _read_file(self, path: Path) -> bytes:
        fd = self.ops.open(path, os.O_RDONLY)
        try:
            return self.ops.read_all(fd)
        finally:
            self.ops.close(fd)

    def _held_lock(self, key: SessionKey) -> asyncio.Lock:
        held = self._held.get(key)
        if held is None:
            held = self._held[key] = asyncio.Lock()
        return held

    def _paths_of(self, key: SessionKey) -> tuple[Path, Path]:
        """The session's file and its cut record."""
        space = self.datadir.space(key.tenant)
        return space.log_path(key.id), space.index / f"{key.id}{CUT_SUFFIX}"

    # -- delete ----------------------------------------------------------------------------------------------------

    async def delete(self, key: SessionKey) -> None:
        held = self._held.get(key)
        if held is not None:
            await held.acquire()  # a compaction of its file finishes first
        try:
            with (
                disk_errors(Access.CHANGE, f"delete session {key.id!r}"),
                self._writer.observer.durable_write(SYNC_SPAN, 0),
            ):
                await asyncio.to_thread(self._delete_file, key)
            live = self.catalog.live(key)
            self.catalog.remove(key)
        finally:
            if held is not None:
                held.release()
                if not held.locked() and self._held.get(key) is held:
                    del self._held[key]
        if live is not None and live.header.archived:
            # Its archive line goes too (a crash first leaves a line of a gone incarnation: the next start drops it).
            with contextlib.suppress(StorageUnavailable):
                await self._write_archived(key, live.header.instance, False)

    # -- idempotent retries (app/backends/files/idempotency_journal.py) ------------------------------------------------

    async def recall(self, tenant: str, idempotency_key: str) -> IdempotencyRecord | None:
        with disk_errors(Access.READ, "read an idempotency key"):
            return await asyncio.to_thread(self.remembered.recall, tenant, idempotency_key)

    async def forget(self, before: int) -> None:
        with disk_errors(Access.CHANGE, "sweep idempotency keys"):
            await asyncio.to_thread(self.remembered.forget, before)

    def _delete_file(self, key: SessionKey) -> None:
        """Note that the session's kept idempotency records stand (their changes were made: a retry after a restart
        must still replay them), then rename the file out of sessions/ (atomic), sync the folder, and unlink it."""
        self.remembered.settle(key.tenant, key.id)
        ops = self.ops
        space = self.datadir.space(key.tenant)
        path = space.log_path(key.id)
        trash = self.datadir.tmp / f"{key.id}.{uuid.uuid4().hex[:12]}.deleted"
        try:
            ops.rename(path, trash)
        except FileNotFoundError:
            return  # gone already: deleted is what was asked
        self._writer.forget(path)
        if self._sync:
            try:
                ops.fsync_dir(path.parent)
            except OSError:
                ops.rename(trash, path)  # not acknowledged: the session keeps its file
                raise
        with contextlib.suppress(OSError):
            ops.unlink(trash)  # the delete is durable already; the next start sweeps a leftover
        with contextlib.suppress(OSError):  # a cut record of another incarnation never applies: instances differ
            self._cuts.clear(space.index / f"{key.id}{CUT_SUFFIX}")


def _frame_copy(
    path: Path, source_id: str, instance: str, frames: FrameIndex, log: SessionLog, count: int
) -> _BodyCopy:
    """How a fork of ``count`` events copies its compressed source: the source's whole frames within the seed,
    then the seed's lines after them and the fork's own events (``log`` is the fork's, sharing the seed's bytes)."""
    seed_bytes = log.offset(count)
    whole = frames.whole_frames(seed_bytes)
    # (the source's frames end at its events' ends: the seq just after the last whole frame)
    after = bisect.bisect_left(range(count + 1), frames.body_start(whole), key=log.offset)
    if log.offset(after) != frames.body_start(whole):
        whole, after = 0, 0  # an index that does not fit the log (never expected): the whole seed is re-encoded
    size = frames.file_start(whole) - frames.header_end
    return _BodyCopy(path, source_id, instance, size, log.lines(after), frames, whole)


def _digest_of(staged: StagedEvents, record: IdempotencyRecord) -> str:
    """The digest of the lines a record's append added (events first_seq .. end_seq - 1 of the batch)."""
    first, last = record.first_seq - staged.base_count, record.end_seq - staged.base_count
    start = staged.ends[first - 1] if first > 0 else 0
    return lines_digest(memoryview(staged.lines)[start : staged.ends[last - 1]])
