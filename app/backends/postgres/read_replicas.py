"""Reads from hot standbys with read-your-writes across every forklog process (spec 6, Read replicas).

A standby read (:mod:`app.backends.read_routing`: the routes that declare it) must see every change acknowledged
before ``since``, its request's arrival (or a stream's latest look). An acknowledged change is flushed on the
primary (synchronous commit), so its commit record ends at or before the primary's ``pg_current_wal_flush_lsn()``
asked after ``since``: that position is the read's *fence*. A standby whose ``pg_last_wal_replay_lsn()`` has reached
the fence has replayed the commit, and a snapshot taken on it from then on sees the change.

- The fence costs the primary one cheap query a round, not one a read: :class:`RoundQuery` keeps one query in
  flight, and its answer serves every read that arrived before it was sent (the others wait for the next round).
- The read's connection is taken from a standby's pool and asked its replay position before the read runs on it:
  that proves this very server has replayed the fence (a standby restarted since the last look may have gone back),
  and finds a lost standby before the read does. A standby behind the fence is waited for, its replay position
  polled (one query a round for all the reads waiting on it), at most ``lag_max`` after ``since``; then the read
  runs on the primary.
- A standby that fails (or is not a standby: promoted, or a primary named by mistake) is passed over, logged once,
  and tried again every ``RETRY_LOST`` seconds; once it answers it serves again (logged once too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.backends.database_url import redact
from app.backends.postgres.errors import DRIVER_ERRORS
from app.backends.postgres.pool import Connection, PoolSettings
from app.backends.read_routing import StandbyRead, without_standby_reads

__all__ = ["PRIMARY_POSITION", "REPLAY_POSITION", "ReadReplicas", "RoundQuery", "Standby"]

logger = logging.getLogger("forklog.storage")

# WAL positions as numbers of bytes (asyncpg reads a pg_lsn as text): comparable in Python.
PRIMARY_POSITION = "SELECT (pg_current_wal_flush_lsn() - '0/0'::pg_lsn)::bigint"
REPLAY_POSITION = "SELECT (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint"  # NULL on a server not in recovery
RETRY_LOST = 1.0  # seconds between two tries of a standby that failed
POLL_FIRST = 0.0005  # seconds before a lagging standby's replay position is asked again; doubled up to POLL_MAX
POLL_MAX = 0.002  # (one question a round for every read waiting on the standby: cheap)
ACQUIRE_AT_LEAST = 0.25  # seconds a read may wait for a standby's connection, even past the lag allowed
CHECK_TIMEOUT = 1.0  # seconds a standby may take to answer its replay position before it counts as lost

T = TypeVar("T")


class RoundQuery(Generic[T]):
    """A query asked in rounds: one in flight at a time, whose answer serves every caller that asked before it was
    sent; a caller that asks while a round is in flight waits for the next one (its answer must be newer)."""

    def __init__(self, ask: Callable[[], Awaitable[T]]) -> None:
        self._ask = ask
        self._round: asyncio.Task[T] | None = None
        self._sent_at = -math.inf
        self.rounds = 0  # how many were sent

    async def after(self, moment: float) -> T:
        """The answer of a round sent at or after ``moment`` (a ``time.monotonic()``)."""
        while True:
            current = self._round
            if current is None or (current.done() and self._sent_at < moment):
                current = self._start()
            if self._sent_at >= moment:
                return await asyncio.shield(current)
            await asyncio.wait([current])  # a round sent before the caller asked: the next one serves it

    def _start(self) -> asyncio.Task[T]:
        self._sent_at = time.monotonic()  # taken before the query goes out: never later than its sending
        self.rounds += 1
        task = asyncio.get_running_loop().create_task(self._run(), context=without_standby_reads())
        task.add_done_callback(_retrieve)
        self._round = task
        return task

    async def _run(self) -> T:
        return await self._ask()


def _retrieve(task: asyncio.Task[object]) -> None:
    # A failed round is the failure of its callers; one nobody awaited is not logged as never retrieved.
    if not task.cancelled():
        task.exception()


class NotAStandby(Exception):
    """The server is not in recovery (promoted, or a primary): its replay position says nothing of the fence."""


# What makes a standby pass over for a while.
STANDBY_FAILURES: tuple[type[Exception], ...] = (*DRIVER_ERRORS, NotAStandby)


class Standby:
    """One hot standby of the read URL, with its own pool of connections (made as reads need them)."""

    def __init__(self, url: str, settings: PoolSettings) -> None:
        self.url = url
        self.where = redact(url)
        self._settings = settings
        self._pool: asyncpg.Pool | None = None
        self._making_pool = asyncio.Lock()  # (made at the first read: two reads at once make one)
        self._failed_at: float | None = None  # while lost: when it last failed
        self._lagging = False
        self.replayed: RoundQuery[int] = RoundQuery(self._ask_replayed)
        self.reads = 0  # reads it served

    @property
    def usable(self) -> bool:
        """Not lost, or lost long enough ago to be tried again."""
        return self._failed_at is None or time.monotonic() - self._failed_at >= RETRY_LOST

    async def _pool_now(self) -> asyncpg.Pool:
        if self._pool is None:
            async with self._making_pool:
                if self._pool is None:
                    self._pool = await asyncpg.create_pool(
                        self.url,
                        min_size=0,
                        max_size=self._settings.max_size,
                        timeout=self._settings.connect_timeout,
                        command_timeout=self._settings.command_timeout,
                        max_inactive_connection_lifetime=60.0,
                    )
        return self._pool

    async def _ask_replayed(self) -> int:
        pool = await self._pool_now()
        async with pool.acquire(timeout=CHECK_TIMEOUT) as conn:
            return _replay_position(await conn.fetchval(REPLAY_POSITION, timeout=CHECK_TIMEOUT))

    @contextlib.asynccontextmanager
    async def connection(
        self, fence: Callable[[], Awaitable[int]], deadline: float
    ) -> AsyncIterator[Connection | None]:
        """A connection to this standby once it has replayed the position ``fence`` gives (waiting until ``deadline``
        at most), or None: it lags past the deadline, or it failed (then it is passed over for a while). The fence
        is awaited only once the connection has told its replay position: the two questions go out together."""
        conn: PoolConnectionProxy[asyncpg.Record] | None = None
        pool: asyncpg.Pool | None = None
        try:
            delay = POLL_FIRST
            while True:
                remaining = deadline - time.monotonic()
                pool = await self._pool_now()
                # A connection taken within the time left to wait (a quarter of a second at least: a new one is made
                # in milliseconds); a standby that cannot give one in time is passed over for a while.
                conn = await pool.acquire(timeout=min(CHECK_TIMEOUT, max(ACQUIRE_AT_LEAST, remaining)))
                position = _replay_position(await conn.fetchval(REPLAY_POSITION, timeout=CHECK_TIMEOUT))
                wanted = await fence()
                if position >= wanted:
                    break
                await pool.release(conn)
                conn = None
                # Behind: wait with every other read waiting on this standby (one question a round), then look again.
                while position < wanted:
                    if time.monotonic() + delay > deadline:
                        self._lag(True)
                        break
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, POLL_MAX)
                    position = await self.replayed.after(time.monotonic())
                if position < wanted:
                    break
        except STANDBY_FAILURES as exc:
            if conn is not None and pool is not None:
                with contextlib.suppress(*DRIVER_ERRORS):  # (a connection lost is given back to its pool already)
                    conn.terminate()
                    await pool.release(conn)
                conn = None
            await self._lost(exc)
        except BaseException:  # the fence failed (the primary is down), or the read was cancelled
            if conn is not None and pool is not None:
                await pool.release(conn)
            raise
        else:
            self._back()
            if conn is not None:
                self._lag(False)
                self.reads += 1
        try:
            yield conn
        finally:
            if conn is not None and pool is not None:
                await pool.release(conn)

    def _back(self) -> None:
        if self._failed_at is not None:
            self._failed_at = None
            logger.warning("the standby %s answers again: it serves reads again", self.where)

    def _lag(self, lagging: bool) -> None:
        if lagging != self._lagging:
            self._lagging = lagging
            if lagging:
                logger.warning("the standby %s lags more than the read lag allowed: reads move to the primary",
                               self.where)  # fmt: skip
            else:
                logger.warning("the standby %s caught up: it serves reads again", self.where)

    async def _lost(self, exc: BaseException) -> None:
        if self._failed_at is None:
            logger.warning(
                "the standby %s cannot serve reads (%s: %s): they move to the primary until it answers",
                self.where,
                type(exc).__name__,
                exc,
            )
        # Passed over for a while; its pool is kept (reads still running on it end as they do: a pool that was
        # only busy loses nothing), and the connection that failed was terminated.
        self._failed_at = time.monotonic()

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=self._settings.connect_timeout)
            except DRIVER_ERRORS:
                pool.terminate()


def _replay_position(found: object) -> int:
    if found is None:
        raise NotAStandby("the server is not in recovery (not a standby)")
    return int(str(found))


class ReadReplicas:
    """The standbys of ``urls`` and the primary's WAL position asked by ``primary_position``, which the standby
    reads wait for (see the module's docstring)."""

    def __init__(
        self,
        urls: Sequence[str],
        settings: PoolSettings,
        *,
        lag_max: float,
        primary_position: Callable[[], Awaitable[int]],
    ) -> None:
        self.standbys = [Standby(url, settings) for url in urls]
        self.lag_max = lag_max
        self.fences: RoundQuery[int] = RoundQuery(primary_position)
        self.primary_reads = 0  # standby reads that ran on the primary
        self._next = 0

    @contextlib.asynccontextmanager
    async def connection(self, read: StandbyRead) -> AsyncIterator[Connection | None]:
        """A standby's connection that sees every change acknowledged before ``read.since``; None: use the primary
        (no standby reached the fence within ``lag_max``, or none answers)."""
        # Asked now, awaited once a standby's connection has told its replay position (one round trip, not two);
        # not at all if no standby is tried.
        asked = asyncio.ensure_future(self.fences.after(read.since)) if read.fence is None else None

        async def fence() -> int:
            if read.fence is None:
                assert asked is not None
                read.fence = await asked
            return read.fence

        deadline = read.since + self.lag_max
        start, self._next = self._next, self._next + 1
        count = len(self.standbys)
        try:
            for offset in range(count):
                standby = self.standbys[(start + offset) % count]
                if not standby.usable:
                    continue
                async with standby.connection(fence, deadline) as conn:
                    if conn is not None:
                        yield conn
                        return
        finally:
            if asked is not None and not asked.done():
                asked.cancel()  # (the round itself goes on for the reads that share it)
            elif asked is not None:
                _retrieve(asked)
        self.primary_reads += 1
        yield None

    async def close(self) -> None:
        for standby in self.standbys:
            await standby.close()
