"""The packer: replaces the small rows of ended turns by packs (:mod:`~app.backends.postgres.packs`), just after the
append of their ``turn/end`` commits, in the background.

An append stays one statement (a small batch's small rows, as before); when its batch holds a ``turn/end``, the
replica wakes its packer for that log, which in one transaction (under the log row's lock, which the sweep takes
too) reads the log's small rows up to its last ``turn/end``, inserts their packs (a pack a turn, each run of
consecutive small rows apart) and deletes them. A read is one statement, so it sees the events either before or
after that commit, the same lines either way. Small rows left by a replica that stopped before packing are packed
with the log's next ``turn/end``; the logs an older forklog stored are in ``forklog_pack_queue`` (schema 9), which
every replica works through in the background, :data:`BATCH_EVENTS` events a transaction: an outage or a restart
interrupts it between two batches, and it resumes from what is left.

The deleted small rows leave dead tuples, which :mod:`~app.backends.postgres.vacuum` makes reusable soon after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from app.backends.background import BackgroundLoop
from app.backends.errors import Access, StorageUnavailable
from app.backends.postgres.packs import pack_runs
from app.backends.postgres.pool import Connection

__all__ = ["BATCH_EVENTS", "Packer", "pack_log"]

logger = logging.getLogger("forklog.storage")

BATCH_EVENTS = 20_000  # small rows packed per transaction
QUEUE_LOGS = 20  # queued logs taken per round
QUEUE_EVERY = 30.0  # seconds between two looks at the queue

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
        packed = 0
        for first, lines in _runs(rows):  # between runs: events an append stored as packs already
            last = first + len(lines) - 1
            turn_ends = [row["seq"] for row in await conn.fetch(_TURN_ENDS, log, first, last)]
            await conn.execute(_INSERT, log, *pack_runs(first, lines, turn_ends).params())
            await conn.execute(_DELETE, log, first, last)
            packed += len(lines)
        return packed


def _runs(rows: list[Any]) -> list[tuple[int, list[bytes]]]:
    """The rows (seq, line; in seq order) as runs of consecutive seqs: (first seq, lines with their newline)."""
    runs: list[tuple[int, list[bytes]]] = []
    for row in rows:
        if not runs or row["seq"] != runs[-1][0] + len(runs[-1][1]):
            runs.append((row["seq"], []))
        runs[-1][1].append(row["line"].encode() + b"\n")
    return runs


class Packer(BackgroundLoop):
    """Packs the logs it is woken for, and the queued ones; calls ``deleted`` after it deleted small rows."""

    task_name = "forklog-packer"

    def __init__(self, connect: Connect, deleted: Callable[[], None], *, queue_every: float = QUEUE_EVERY) -> None:
        self._connect = connect
        self._deleted = deleted
        self._queue_every = queue_every
        self._pending: set[int] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self, log: int) -> None:
        self._pending.add(log)
        self._wake.set()

    async def _run(self) -> None:
        queue_at = 0.0
        while True:
            try:
                if time.monotonic() >= queue_at:
                    await self._queued()
                    queue_at = time.monotonic() + self._queue_every
                while self._pending:
                    log = self._pending.pop()  # a wake for it from now on is another round
                    try:
                        await self._pack(log)
                    except BaseException:
                        self._pending.add(log)  # an outage meanwhile leaves it for the next try
                        raise
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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(0.0, queue_at - time.monotonic()))
            self._wake.clear()

    async def _pack(self, log: int) -> None:
        while True:
            async with self._connect(Access.CHANGE) as conn:
                packed = await pack_log(conn, log)
            if packed:
                self._deleted()
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
