"""The durable file backend: one DSH-format JSONL file per session in a data directory (spec section 4).

Every log is also held in this process's memory (reads never touch the disk); every change is written and synced
before it is acknowledged, and only then made visible in memory. One process owns a data directory at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from app.backends.base import ChangeListener, CorruptEntry, Readiness, Remember, Remembered, Seed, Tip
from app.backends.catalog import Catalog, LiveSession
from app.backends.errors import AlreadyExists, StaleHead, StorageUnavailable
from app.backends.files.codec import encode_header
from app.backends.files.cuts import CUT_SUFFIX, CutRecords
from app.backends.files.datadir import DataDir
from app.backends.files.fileops import FileOps
from app.backends.files.index import write_index
from app.backends.files.recovery import Recovery, RecoveryReport
from app.backends.files.remembered import RememberedJournal, lines_digest
from app.backends.files.writer import AppendWriter
from app.backends.memory import live_prefix, log_chunks
from app.domain.log import SessionLog, StagedEvents
from app.domain.session import Session, SessionHeader, SessionKey, head_of

__all__ = ["FileBackend"]

logger = logging.getLogger("forklog.storage")

# Idempotency records older than this are dropped at a start (the service sweeps them meanwhile): spec 8's 24 hours.
KEEP_REMEMBERED_MS = 24 * 60 * 60 * 1000


class FileBackend:
    """Sessions in ``data_dir``; the process holds the directory's lock from construction to :meth:`close`.

    ``ops`` is the door to the operating system (tests pass a :class:`FileOps` that injects faults).
    """

    name = "files"

    def __init__(
        self,
        data_dir: Path | str,
        *,
        clock: Callable[[], int],
        sync: bool = True,
        ops: FileOps | None = None,
    ) -> None:
        self.ops = ops if ops is not None else FileOps()
        self._clock = clock
        self._sync = sync
        self.datadir = DataDir(data_dir, self.ops, sync=sync)
        self.datadir.lock()
        self.catalog = Catalog(clock)
        self.remembered = RememberedJournal(self.datadir.root / "index", self.ops, sync=sync)
        self._cuts = CutRecords(self.ops, sync=sync)
        self._writer = AppendWriter(self.ops, self._cuts, sync=sync)
        self._corrupt: list[CorruptEntry] = []
        self.recovery = RecoveryReport()  # what the start found (filled by open)
        self._opened = False
        self._closed = False

    @property
    def data_dir(self) -> Path:
        return self.datadir.root

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def open(self) -> None:
        report = await asyncio.to_thread(
            Recovery(self.datadir, self.ops, self._cuts, now=self._clock(), repair=True, sync=self._sync).run
        )
        self.catalog.load(report.sessions)
        for key, reason, created_at in report.quarantined:
            self.catalog.quarantine(key, reason, created_at=created_at)
        self._corrupt = report.corrupt
        report.sessions = []  # the catalog holds them now
        self.recovery = report
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

    def _change_is_there(self, record: Remembered, digest: str | None) -> bool:
        """Whether a record's change was made: its session, that incarnation, holding its events byte for byte."""
        live = self.catalog.get(SessionKey(record.tenant, record.session))
        if live is None or live.header.instance != record.instance or len(live.log) < record.end_seq:
            return False
        return digest is None or lines_digest(live.log.lines(record.first_seq, record.end_seq)) == digest

    @property
    def corrupt(self) -> list[CorruptEntry]:
        """The stored sessions the last start kept out of service."""
        return list(self._corrupt)

    async def close(self, *, index: bool = True) -> None:
        """At a clean shutdown: index the live sessions for a fast next start, then release the directory.
        ``index=False`` leaves what a crash leaves (the index files of the last clean shutdown)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._opened and index:
                await asyncio.to_thread(self._save_indexes)
        finally:
            self._writer.close()
            self.datadir.unlock()

    def _save_indexes(self) -> None:
        for live in self.catalog:
            try:
                folder = self.datadir.space(live.key.tenant).index
                write_index(folder, live.key.id, live.log, ops=self.ops, sync=self._sync)
            except OSError as exc:  # an index only makes a start faster: without it the next start checks all
                logger.warning("could not write the index of session %s: %s", live.key.id, exc.strerror)

    async def readiness(self) -> Readiness:
        return Readiness(len(self.catalog), list(self._corrupt))

    def listen(self, listener: ChangeListener) -> None:
        return None  # one process owns the directory: every change is this process's own

    # -- reads (from memory) -----------------------------------------------------------------------------------------

    async def find(self, key: SessionKey) -> Session | None:
        live = self.catalog.get(key)
        return live.view() if live is not None else None

    async def page(
        self, tenant: str, *, parent: str | None, after: tuple[int, str] | None, limit: int
    ) -> list[Session]:
        return [live.view() for live in self.catalog.page(tenant, parent=parent, after=after, limit=limit)]

    async def read(self, key: SessionKey, start: int, stop: int) -> bytes:
        live = self.catalog.get(key)
        return live.log.lines(start, stop) if live is not None else b""

    def chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]:
        live = self.catalog.get(key)
        if live is None or live.header.instance != instance:
            raise StaleHead(f'session "{key.id}" is no longer the incarnation the snapshot was checked against')
        return log_chunks(live.log.prefix(stop))

    async def is_turn_end(self, key: SessionKey, seq: int) -> bool:
        live = self.catalog.get(key)
        return live is not None and live.log.is_turn_end(seq)

    async def history(self, key: SessionKey, at_seq: int | None) -> list[Any]:
        live = self.catalog.get(key)
        return live.log.history(at_seq) if live is not None else []

    async def tip(self, key: SessionKey, wanted: Iterable[int] = (), *, refresh: bool = False) -> Tip | None:
        live = self.catalog.get(key)
        return Tip(live.view(), live.log) if live is not None else None

    # -- create ----------------------------------------------------------------------------------------------------

    async def create(
        self, key: SessionKey, instance: str, lineage: Mapping[str, Any], seed: Seed, remember: Remember | None = None
    ) -> Session:
        if self.catalog.get(key) is not None:
            raise AlreadyExists(key.id)
        log = live_prefix(self.catalog, seed)
        header = self.catalog.new_header(key, instance, lineage)
        records = [remember(Session(key, header, head_of(log.state)))] if remember is not None else []
        self.remembered.check_free(records)
        return await self._make(key, header, log, [(record, None) for record in records])

    async def restore(self, key: SessionKey, header: SessionHeader, log: SessionLog) -> Session:
        if self.catalog.get(key) is not None:
            raise AlreadyExists(key.id)
        return await self._make(key, header, log, [])

    async def tenants(self) -> list[str]:
        return self.catalog.tenants()

    async def _make(
        self, key: SessionKey, header: SessionHeader, log: SessionLog, records: list[tuple[Remembered, str | None]]
    ) -> Session:
        placed = await self._write_records(records)
        body = log.body_view()  # the new session is not live yet: nothing appends while it is written
        try:
            await asyncio.to_thread(self._create_file, key, header, body)
        except FileExistsError:
            raise AlreadyExists(key.id) from None
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to create session {key.id!r}: {exc.strerror}") from exc
        finally:
            body.release()
        live = LiveSession(key, header, log)
        self.catalog.add(live)
        self.remembered.keep(placed)
        return live.view()

    async def _write_records(self, records: list[tuple[Remembered, str | None]]) -> list[Any]:
        """Write (and sync) idempotency records before their change: a change is never durable without its key."""
        if not records:
            return []
        try:
            return await asyncio.to_thread(self.remembered.write, records)
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to keep an idempotency key: {exc.strerror}") from exc

    def _create_file(self, key: SessionKey, header: SessionHeader, lines: bytes | memoryview) -> None:
        """Write header + lines to a temp file, sync it, link it in place (never overwriting), sync the folder."""
        ops = self.ops
        final = self.datadir.log_path(key)
        self._writer.forget(final)
        tmp = self.datadir.tmp / f"{key.id}.{uuid.uuid4().hex[:12]}.tmp"
        fd = ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            try:
                ops.write_all(fd, encode_header(header))
                ops.write_all(fd, lines)
                if self._sync:
                    ops.fsync(fd)
            finally:
                ops.close(fd)
            ops.link(tmp, final)
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

    # -- append ----------------------------------------------------------------------------------------------------

    async def append(self, key: SessionKey, staged: StagedEvents, remember: Sequence[Remembered] = ()) -> None:
        live = self.catalog.get(key)
        if live is None:
            raise StaleHead(f'session "{key.id}" is no longer live')
        if staged.base_count != len(live.log):
            raise StaleHead(f'session "{key.id}" has {len(live.log)} events, not the {staged.base_count} staged on')
        self.remembered.check_free(remember)
        placed = await self._write_records([(record, _digest_of(staged, record)) for record in remember])
        space = self.datadir.space(key.tenant)
        await self._writer.append(
            space.log_path(key.id),
            staged.lines,
            instance=live.header.instance,
            cut_record=space.index / f"{key.id}{CUT_SUFFIX}",
        )
        live.log.commit(staged)
        self.remembered.keep(placed)

    # -- delete ----------------------------------------------------------------------------------------------------

    async def delete(self, key: SessionKey) -> None:
        try:
            await asyncio.to_thread(self._delete_file, key)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to delete session {key.id!r}: {exc.strerror}") from exc
        self.catalog.remove(key)

    # -- idempotent retries (app/backends/files/remembered.py) ---------------------------------------------------------

    async def recall(self, tenant: str, idempotency_key: str) -> Remembered | None:
        try:
            return await asyncio.to_thread(self.remembered.recall, tenant, idempotency_key)
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to read an idempotency key: {exc.strerror}") from exc

    async def forget(self, before: int) -> None:
        try:
            await asyncio.to_thread(self.remembered.forget, before)
        except OSError as exc:
            raise StorageUnavailable(f"the disk refused to sweep idempotency keys: {exc.strerror}") from exc

    def _delete_file(self, key: SessionKey) -> None:
        """Rename the file out of sessions/ (atomic), sync the folder, then unlink it."""
        ops = self.ops
        space = self.datadir.space(key.tenant)
        path = space.log_path(key.id)
        trash = self.datadir.tmp / f"{key.id}.{uuid.uuid4().hex[:12]}.deleted"
        ops.rename(path, trash)
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


def _digest_of(staged: StagedEvents, record: Remembered) -> str:
    """The digest of the lines a record's append added (events first_seq .. end_seq - 1 of the batch)."""
    first, last = record.first_seq - staged.base_count, record.end_seq - staged.base_count
    start = staged.ends[first - 1] if first > 0 else 0
    return lines_digest(memoryview(staged.lines)[start : staged.ends[last - 1]])
