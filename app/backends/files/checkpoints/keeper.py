"""Keeping every session's checkpoint current while the service runs, in the background, so that a start after a
crash checks only what was appended since the last round.

A session is *dirty* once it has events no durable record covers (it was created, appended to, or its tail was
checked at the start). Every ``interval`` seconds a round takes the dirty sessions: on the event loop it takes, for
each, what its log gained since its last record (views of sealed parts, a copy of the rest: O(what was appended),
nothing is encoded there); in a worker thread it encodes the records (digests included), appends them to the
journal and syncs it once; back on the loop, each session's ``checkpointed`` count moves on. Nothing of this is on
the append path, and a record is trusted (built upon) only once it is durable. A clean stop runs one last round: it
writes what the last second appended, not one file per session.

When the journal has grown to several times the size it had after its last rewrite, a round rewrites it with one
record per live session (the chains read back from the journal itself and merged, so no byte of a log is hashed
again), and every session's count is set to what the new file holds. A round that fails (the disk refused) leaves
its sessions dirty; the next one tries again, rewriting the journal first if the failed append could not be cut back.

Later, idempotency records (issue 13) belong in a journal of their own written by the append writer in the same
round as the session files they go with (synced by the same ``syncfs``), not here: this journal may lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from dataclasses import dataclass, field

from app.backends.catalog import Catalog, LiveSession
from app.backends.files.checkpoints.journal import Journal, Record
from app.backends.files.checkpoints.records import (
    BLOCK_BYTES,
    COLD_BYTES,
    ColdLog,
    decode_record,
    encode_record,
    read_chains,
)
from app.backends.files.disk.fileops import release_free_memory
from app.backends.log_parts import LogDelta, log_since
from app.domain.log import Buffer
from app.domain.session import SessionKey

__all__ = ["Checkpointer"]

logger = logging.getLogger("forklog.storage")

# The journal is rewritten once it is larger than this and than REWRITE_GROWTH times its size after the last rewrite.
REWRITE_MIN_BYTES = 16 * 1024 * 1024
REWRITE_GROWTH = 3
# After a round of more events than this, freed memory is handed back to the system at once.
LARGE_ROUND_EVENTS = 100_000


@dataclass(slots=True)
class _Item:
    live: LiveSession
    delta: LogDelta
    record: list[Buffer] = field(default_factory=list)


class Checkpointer:
    def __init__(
        self,
        journal: Journal,
        catalog: Catalog,
        *,
        interval: float | None,
        rewrite_min_bytes: int = REWRITE_MIN_BYTES,
    ) -> None:
        self._journal = journal
        self._rewrite_min_bytes = rewrite_min_bytes
        self._catalog = catalog
        self._interval = interval
        self._dirty: dict[SessionKey, LiveSession] = {}
        self._task: asyncio.Task[None] | None = None
        self._round: asyncio.Future[None] | None = None
        # Rounds run one at a time: on the event loop (the lock is made anew if the backend is closed from another
        # loop than it ran on, as tests do), and in the worker threads that touch the journal.
        self._round_lock = asyncio.Lock()
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._journal_lock = threading.Lock()
        self._rewritten_size = max(journal.size, 0)
        self.rounds = 0  # rounds that wrote something
        self.rewrites = 0

    def touch(self, live: LiveSession) -> None:
        """``live`` has events no record covers yet."""
        if live.checkpointed >= 0:
            self._dirty[live.key] = live

    @property
    def pending(self) -> int:
        return len(self._dirty)

    def start(self) -> None:
        if self._interval is not None and self._task is None:
            self._task = asyncio.create_task(self._run(self._interval), name="forklog-checkpoints")

    # Not a BackgroundLoop.Periodic like the other loops: a stop must cancel the wait, never a round under way (a
    # half-written round would leave the journal to be rewritten), so each round is shielded and awaited by stop.
    async def _run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            self._round = asyncio.ensure_future(self._background_round())
            await asyncio.shield(self._round)  # a stop cancels the wait, never a round under way

    async def _background_round(self) -> None:
        await self.checkpoint_quietly()

    async def checkpoint_quietly(self) -> None:
        """:meth:`checkpoint`, a failure only logged: each session stays dirty and is tried again next round."""
        try:
            await self.checkpoint()
        except Exception:  # never let a bug stop the rounds (nor a start)
            logger.exception("a checkpoint round failed")

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock_loop is not loop:
            self._round_lock = asyncio.Lock()
            self._lock_loop = loop
        return self._round_lock

    async def checkpoint(self) -> None:
        """One round now: every dirty session's record written and synced (or, if the disk refused, still dirty)."""
        async with self._lock():
            if self._journal.broken or self._journal.size > max(
                self._rewrite_min_bytes, REWRITE_GROWTH * self._rewritten_size
            ):
                await self._rewrite()
            items = self._take()
            if not items:
                return
            try:
                await asyncio.to_thread(self._write, items)
            except BaseException as exc:
                for item in items:  # whatever went wrong, they are tried again next round
                    self._dirty.setdefault(item.live.key, item.live)
                if not isinstance(exc, OSError):
                    raise
                logger.warning("could not write %d checkpoints (they are tried again): %s", len(items), exc.strerror)
                return
            self.rounds += 1
            for item in items:
                self._settle(item)

    def _take(self) -> list[_Item]:
        """On the event loop: what each dirty session gained since its last record."""
        dirty, self._dirty = self._dirty, {}
        items = []
        for key, live in dirty.items():
            if self._catalog.live(key) is not live or live.checkpointed < 0 or live.frozen:
                continue  # deleted, replaced by a new incarnation, or never checkpointed
            log = live.log
            start = live.checkpointed
            if len(log) <= start:
                continue
            items.append(_Item(live, log_since(log, start, log.offset(start) // BLOCK_BYTES * BLOCK_BYTES)))
        return items

    def _write(self, items: list[_Item]) -> None:
        """In a worker thread: encode the records, append them, sync."""
        for item in items:
            item.record = encode_record(item.live.key, item.live.header.instance, item.delta)
        with self._journal_lock:
            self._journal.append([item.record for item in items])
        if sum(item.delta.stop - item.delta.start for item in items) > LARGE_ROUND_EVENTS:
            release_free_memory()  # a large round's encoding is not kept by the allocator for later

    def _settle(self, item: _Item) -> None:
        live, delta = item.live, item.delta
        if live.checkpointed != delta.start or self._catalog.live(live.key) is not live:
            return
        live.checkpointed = delta.stop
        log = live.log
        if len(log) != delta.stop:
            self._dirty.setdefault(live.key, live)  # appended to during the round: the next one takes the rest
        elif delta.start == 0 and delta.body_stop <= COLD_BYTES:
            frozen = ColdLog.of(decode_record(b"".join(item.record)), log.lines())
            if frozen is not None:
                live.freeze(frozen)

    async def _rewrite(self) -> None:
        """Rewrite the journal with one record per live session; set every session's count to what it holds."""
        live = {session.key: session for session in self._catalog}
        instances = {key: session.header.instance for key, session in live.items()}
        try:
            kept = await asyncio.to_thread(self._rewrite_file, instances)
        except OSError as exc:
            logger.warning("could not rewrite the checkpoint journal (it is tried again): %s", exc.strerror)
            return
        self._rewritten_size = self._journal.size
        self.rewrites += 1
        for key, session in live.items():
            if session.checkpointed < 0 or self._catalog.live(key) is not session:
                continue
            covered = kept.get(key, 0)
            if session.checkpointed != covered:
                session.checkpointed = covered
                self.touch(session)

    def _rewrite_file(self, instances: dict[SessionKey, str]) -> dict[SessionKey, int]:
        with self._journal_lock:
            return self._rewrite_locked(instances)

    def _rewrite_locked(self, instances: dict[SessionKey, str]) -> dict[SessionKey, int]:
        chains = read_chains(self._journal.read() if not self._journal.broken else [])
        records: list[Record] = []
        kept: dict[SessionKey, int] = {}
        for key, chain in chains.items():
            if instances.get(key) != chain.instance:
                continue
            try:
                records.append(chain.merged())
            except ValueError:
                continue
            kept[key] = chain.stop
        self._journal.rewrite(records)
        return kept

    async def close(self, *, flush: bool) -> None:
        """Stop the rounds; with ``flush``, write the last one first (a clean stop)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        current = self._round
        if current is not None and not current.done() and current.get_loop() is asyncio.get_running_loop():
            await current  # a round under way ends first (its thread cannot be cancelled)
        if flush:
            try:
                await self.checkpoint()
            except Exception:
                logger.exception("the last checkpoint round failed; the next start checks what it would have covered")
        with self._journal_lock:
            self._journal.close()
