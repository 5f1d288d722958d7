"""VACUUM soon after the changes that leave dead tuples, so that the database holds about what is live.

Three tables turn rows into dead tuples as they work: ``forklog_events`` (the packer deletes the small rows of each
ended turn), ``forklog_sessions`` (every append updates its session's row, and its indexes take a new entry each
time) and ``forklog_search`` (each round of the index rewrites a session's words). PostgreSQL reuses their space only
once VACUUM has run, and autovacuum wakes once a minute at best: under a stream of one-event appends, the tables
would grow by every event's row and every update before it came. So each replica vacuums the three after its
packer deleted rows (once a turn ended: often enough for the session rows' churn too, and never in the middle of a
stream of appends within a turn), at most once every :data:`VACUUM_EVERY` seconds and at most :data:`VACUUM_SHARE`
of the time (a vacuum of a large table spaces the next ones out); ``SKIP_LOCKED`` leaves a table another replica is
vacuuming to it. A role that does not own the tables has them skipped with PostgreSQL's warning (autovacuum still
runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from app.backends.background import BackgroundLoop
from app.backends.errors import Access, StorageUnavailable
from app.backends.postgres.pool import Connection

__all__ = ["VACUUM_EVERY", "Vacuum"]

logger = logging.getLogger("forklog.storage")

VACUUM_EVERY = 1.0  # seconds at least between two vacuums
VACUUM_SHARE = 0.05  # at most this share of the time spent vacuuming
STATEMENT = "VACUUM (SKIP_LOCKED) forklog_events, forklog_sessions, forklog_search"

Connect = Callable[[Access], contextlib.AbstractAsyncContextManager[Connection]]


class Vacuum(BackgroundLoop):
    """Vacuums the churning tables after :meth:`dirty` was called (by the packer)."""

    task_name = "forklog-vacuum"

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.runs = 0

    def dirty(self) -> None:
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            started = time.monotonic()
            try:
                async with self._connect(Access.CHANGE) as conn:
                    await conn.execute(STATEMENT)
                self.runs += 1
            except asyncio.CancelledError:
                raise
            except StorageUnavailable:
                self._wake.set()  # again once the database is back
            except Exception:
                logger.exception("vacuuming forklog's tables failed; it is tried again later")
            took = time.monotonic() - started
            await asyncio.sleep(max(VACUUM_EVERY, took / VACUUM_SHARE))
