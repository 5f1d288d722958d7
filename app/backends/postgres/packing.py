"""The packer: replaces the small rows of ended turns by packs (:mod:`~app.backends.postgres.packs`), just after the
append of their ``turn/end`` commits, in the background.

An append stays one statement (its small rows, as before); when its batch holds a ``turn/end``, the replica wakes
its packer for that log, which in one transaction (under the log row's lock, which the sweep takes too) reads the
log's small rows up to its last ``turn/end``, inserts their packs and deletes them. A read is one statement, so it
sees the events either before or after that commit, the same lines either way. Small rows left by a replica that
stopped before packing are packed with the log's next ``turn/end``; the logs an older forklog stored are in
``forklog_pack_queue`` (schema 9), which every replica works through in the background, :data:`BATCH_EVENTS` events
a transaction: an outage or a restart interrupts it between two batches, and it resumes from what is left.

The deleted small rows leave dead tuples that only VACUUM makes reusable: the packer vacuums ``forklog_events`` soon
after deleting rows (at most once every :data:`VACUUM_EVERY` seconds, and less often when a vacuum takes long), so
the table holds about the open turns' rows, not every event ever appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from app.backends.background import BackgroundLoop
from app.backends.errors import Access, StorageUnavailable
from app.backends.postgres.packs import pack_runs
from app.backends.postgres.pool import Connection

__all__ = ["BATCH_EVENTS", "Packer", "pack_log"]

logger = logging.getLogger("forklog.storage")

BATCH_EVENTS = 20_000  # small rows packed per transaction
QUEUE_LOGS = 20  # queued logs taken per round
QUEUE_EVERY = 30.0  # seconds between two looks at the queue
VACUUM_EVERY = 1.0  # seconds at least between two vacuums of the small rows
VACUUM_SHARE = 0.05  # at most this share of the time spent vacuuming

_LOCK_LOG = "SELECT id FROM forklog_logs WHERE id = $1 FOR UPDATE"
_ENDED_ROWS = """
SELECT e.seq, e.line FROM forklog_events e
WHERE e.log = $1 AND e.seq <= (SELECT max(t.seq) FROM forklog_turn_ends t WHERE t.log = $1)
ORDER BY e.seq LIMIT $2
"""
_TURN_ENDS = "SELECT seq FROM forklog_turn_ends WHERE log = $1 AND seq >= $2 AND seq <= $3"
_INSERT = """
INSERT INTO forklog_packs (log, seq, count, size, compressed, body)
SELECT $1, u.* FROM unnest($2::bigint[], $3::int[], $4::int[], $5::bool[], $6::bytea[]) AS u
"""
_DELETE = "DELETE FROM forklog_events WHERE log = $1 AND seq >= $2 AND seq <= $3"
_QUEUED = "SELECT log FROM forklog_pack_queue ORDER BY log LIMIT $1"

Connect = Callable[[Access], contextlib.AbstractAsyncContextManager[Connection]]


async def pack_log(conn: Connection, log: int, limit: int = BATCH_EVENTS) -> int:
    """Pack up to ``limit`` small rows of ``log``'s ended turns, in one transaction; how many were packed (0: none
    left, or the log is gone)."""
    async with conn.transaction():
        if await conn.fetchval(_LOCK_LOG, log) is None:
            return 0
        rows = await conn.fetch(_ENDED_ROWS, log, limit)
        if not rows:
            return 0
        first = rows[0]["seq"]
        lines: list[bytes] = []
        for row in rows:  # a contiguous run only (an older forklog's rows always are)
            if row["seq"] != first + len(lines):
                break
            lines.append(row["line"].encode() + b"\n")
        last = first + len(lines) - 1
        turn_ends = [row["seq"] for row in await conn.fetch(_TURN_ENDS, log, first, last)]
        packs = pack_runs(first, lines, turn_ends)
        await conn.execute(_INSERT, log, *packs.params())
        await conn.execute(_DELETE, log, first, last)
        return len(lines)


class Packer(BackgroundLoop):
    """Packs the logs it is woken for, and the queued ones; vacuums the small rows after."""

    task_name = "forklog-packer"

    def __init__(self, connect: Connect, *, queue_every: float = QUEUE_EVERY) -> None:
        self._connect = connect
        self._queue_every = queue_every
        self._pending: set[int] = set()
        self._wake = asyncio.Event()
        self._deleted = 0
        self._vacuumed_at = 0.0
        self._vacuum_gap = VACUUM_EVERY
        self._task: asyncio.Task[None] | None = None
        self.idle = asyncio.Event()  # set while nothing is left to do (tests and benchmarks wait on it)

    def wake(self, log: int) -> None:
        self._pending.add(log)
        self.idle.clear()
        self._wake.set()

    async def _run(self) -> None:
        queue_at = 0.0
        while True:
            try:
                if time.monotonic() >= queue_at:
                    await self._queued()
                    queue_at = time.monotonic() + self._queue_every
                while self._pending:
                    log = self._pending.pop()
                    await self._pack(log)
                await self._vacuum()
            except asyncio.CancelledError:
                raise
            except StorageUnavailable:
                queue_at = 0.0  # the database is away: look at the queue again once it is back
                await asyncio.sleep(1.0)
                continue
            except Exception:
                logger.exception("packing the ended turns' rows failed; it is tried again later")
                await asyncio.sleep(1.0)
                continue
            if not self._pending and not self._deleted:
                self.idle.set()
            with contextlib.suppress(TimeoutError):
                timeout = self._vacuum_gap if self._deleted else max(0.0, queue_at - time.monotonic())
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            self._wake.clear()

    async def _pack(self, log: int) -> None:
        while True:
            async with self._connect(Access.CHANGE) as conn:
                packed = await pack_log(conn, log)
            self._deleted += packed
            if packed < BATCH_EVENTS:
                return

    async def _queued(self) -> None:
        """Work through the logs an older forklog stored, a few at a time, each dropped from the queue once packed."""
        while True:
            async with self._connect(Access.CHANGE) as conn:
                logs = [row["log"] for row in await conn.fetch(_QUEUED, QUEUE_LOGS)]
            if not logs:
                return
            for log in logs:
                await self._pack(log)
                async with self._connect(Access.CHANGE) as conn:
                    await conn.execute("DELETE FROM forklog_pack_queue WHERE log = $1", log)
                await self._vacuum()

    async def _vacuum(self) -> None:
        if not self._deleted or time.monotonic() - self._vacuumed_at < self._vacuum_gap:
            return
        started = time.monotonic()
        async with self._connect(Access.CHANGE) as conn:
            # SKIP_LOCKED: another replica's vacuum of the same table is as good as this one.
            await conn.execute("VACUUM (SKIP_LOCKED) forklog_events")
        self._deleted = 0
        self._vacuumed_at = time.monotonic()
        self._vacuum_gap = max(VACUUM_EVERY, (self._vacuumed_at - started) / VACUUM_SHARE)
