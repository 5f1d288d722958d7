"""The PostgreSQL backend's lifecycle: the pool, the schema at start, the change feed between replicas, the sweep.

:class:`PostgresCore` holds what every statement needs (the pool, the caches, the doorbell that tells other replicas
of this one's changes); the reads (:mod:`~app.backends.postgres.reads`) and the changes
(:mod:`~app.backends.postgres.backend`) build on it. Every statement runs in :meth:`PostgresCore._connection`, where
the driver's errors are translated (:mod:`~app.backends.postgres.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

import asyncpg

from app.backends.background import Periodic
from app.backends.base import (
    Capabilities,
    ChangeListener,
    LimitsOf,
    Readiness,
)
from app.backends.database_url import standby_urls
from app.backends.errors import Access, StartRefused, StorageUnavailable
from app.backends.observer import NO_STORAGE_OBSERVER, StorageObserver
from app.backends.postgres import queries
from app.backends.postgres.chains import ChainCache
from app.backends.postgres.changes import Doorbell, ReplicaChanges
from app.backends.postgres.errors import DRIVER_ERRORS, database_errors, fails_for_good
from app.backends.postgres.failover import PrimaryWatch
from app.backends.postgres.packing import Packer
from app.backends.postgres.pool import Connection, PoolSettings, connect, open_pool, redact
from app.backends.postgres.pooler import DIRECT, Pooling, behind_pooler, pooled_direct_url, pooling_of
from app.backends.postgres.read_replicas import PRIMARY_POSITION, ReadReplicas
from app.backends.postgres.schema import migrate
from app.backends.postgres.search import PostgresSearch
from app.backends.postgres.state_fill import fill_old_states
from app.backends.postgres.stats_fill import fill_old_stats
from app.backends.postgres.sweep import sweep_once
from app.backends.postgres.tips import TipCache
from app.backends.postgres.vacuum import Vacuum
from app.backends.read_routing import standby_read
from app.domain.ids import new_instance
from app.domain.limits import NO_LIMITS
from app.domain.session import SessionKey

__all__ = ["COMMIT_SPAN", "PostgresCore", "during"]

logger = logging.getLogger("forklog.storage")

# How long a deleted session's rows stay for snapshots still streaming them (the sweep reclaims them afterwards).
ORPHAN_GRACE_MS = 600_000
OWN_CHANGES_KEPT = 100_000
WARN_EVERY = 30.0  # seconds between warnings while a start waits for the database
# The name of a request's wait for its commit, in its trace.
COMMIT_SPAN = "forklog.storage.commit"


@contextlib.asynccontextmanager
async def during(manager: contextlib.AbstractContextManager[object]) -> AsyncIterator[None]:
    """A plain context manager (a trace's span) held across awaits, beside a connection's ``async with``."""
    with manager:
        yield


# pg_try_advisory_xact_lock's key for the retention sweep (one replica sweeps at a time); any fixed 64-bit number.
RETENTION_LOCK = 0x666F726B6C6F6772  # "forklogr"


class PostgresCore:
    """A connection to the database at ``url``; ``open`` waits for it (retrying, unless ``wait`` is off: then it
    raises StorageUnavailable) and brings its schema up to date. ``direct_url``, a URL of the same database that no
    pooler stands in front of, carries what needs a session of its own when ``url`` names a pooler (the change
    feed's LISTEN; :mod:`~app.backends.postgres.pooler`)."""

    name = "postgres"

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], int],
        pool: PoolSettings | None = None,
        poll_interval: float = 0.5,
        sweep_interval: float = 60.0,
        orphan_grace_ms: int = ORPHAN_GRACE_MS,
        tip_cache_size: int = 1024,
        wait: bool = True,
        read_url: str | None = None,
        read_lag_max: float = 1.0,
        direct_url: str | None = None,
    ) -> None:
        self._url = url
        self._direct_url = direct_url
        self._pooling: Pooling = DIRECT  # until the start has looked (every connection outside the pool caches none)
        self._wait = wait
        self.observer: StorageObserver = NO_STORAGE_OBSERVER  # told of each append's commit
        self._clock = clock
        self._settings = pool or PoolSettings()
        self._poll_interval = poll_interval
        self._orphan_grace_ms = orphan_grace_ms
        self._pool: asyncpg.Pool | None = None
        self._replica = new_instance()
        self._tips = TipCache(tip_cache_size)
        self._chains = ChainCache()
        self._listeners: list[ChangeListener] = []
        self._own: set[int] = set()
        self._own_order: deque[int] = deque()
        self._feed = ReplicaChanges(
            url, self._settings, self._replica, self._listeners, poll_interval=poll_interval, own=self._own.__contains__
        )
        self._doorbell = Doorbell(self._replica, self._notify)
        self._watch = PrimaryWatch(url, self._settings, self._drop_connections)
        self._sweeper = Periodic("forklog-sweep", sweep_interval, self._sweep_once)
        self._vacuum = Vacuum(self._connection)
        self._packer = Packer(self._connection, self._vacuum.dirty)
        self._limits_of: LimitsOf = lambda tenant: NO_LIMITS
        # Hot standbys for the reads that may use them (spec 6, Read replicas): see read_replicas.py.
        self.replicas: ReadReplicas | None = None
        if read_url is not None:
            self.replicas = ReadReplicas(
                standby_urls(read_url), self._settings, lag_max=read_lag_max, primary_position=self._wal_position
            )

    @functools.cached_property  # one object for the life of the backend, looked at on every fork and delete
    def capabilities(self) -> Capabilities:
        return Capabilities(enforces_quotas=self, search_engine=self.search_engine, sweep_lease=self.sweep_lease)

    def enforce_quotas(self, limits_of: LimitsOf) -> None:
        """Check each tenant's quotas in its creates, forks and appends (see :mod:`.quotas`)."""
        self._limits_of = limits_of

    @contextlib.asynccontextmanager
    async def sweep_lease(self) -> AsyncIterator[bool]:
        """The retention sweepers' lease (spec 14: expired sessions are deleted once across replicas): a
        transaction-scoped advisory lock, held while the caller sweeps; False at once if another replica holds it."""
        async with self._connection(Access.CHANGE) as conn, conn.transaction():
            yield bool(await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", RETENTION_LOCK))

    @property
    def where(self) -> str:
        """The database's URL without its password."""
        return redact(self._url)

    def search_engine(self) -> PostgresSearch:
        """Search (spec 12) by PostgreSQL's full-text search, in this database (shared by every replica)."""
        return PostgresSearch(self._connection)

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and migrate, retrying with a backoff while the database cannot be reached; StartRefused for a
        schema newer than this forklog's."""
        delay = 0.1
        warned_at: float | None = None
        while True:
            try:
                await self._connect()
                break
            except StartRefused:
                raise
            except DRIVER_ERRORS as exc:
                if fails_for_good(exc):
                    # A migration the role may not run, or one the database refuses: waiting would hang the start.
                    raise StartRefused(
                        f"the database {self.where} refused the start's schema upgrade or fill ({type(exc).__name__}: "
                        f"{exc}); fix the database or the role's privileges, then start again"
                    ) from exc
                if not self._wait:
                    raise StorageUnavailable(f"cannot reach the database {self.where}: {exc}") from None
                now = time.monotonic()
                # A warning at once, then one every WARN_EVERY seconds: a long outage does not flood the log.
                level = logging.WARNING if warned_at is None or now - warned_at >= WARN_EVERY else logging.DEBUG
                if level == logging.WARNING:
                    warned_at = now
                logger.log(
                    level,
                    "the database %s is not reachable yet (%s: %s); trying again in %.1f s",
                    self.where,
                    type(exc).__name__,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        self._sweeper.start()
        self._packer.start()
        self._vacuum.start()
        self._doorbell.start()
        self._watch.start()
        if self._listeners:
            self._feed.start()

    async def _connect(self) -> None:
        """Migrate, fill the rows an older forklog stored without the sidebar's members, then open the pool: one
        attempt of the start, which :meth:`open` repeats whole after an outage (each step is safe to redo: the
        migrations and each batch of the fill commit with what they did, and are found done the next time)."""
        conn = await connect(self._url, self._settings)
        try:
            self._pooling = await pooling_of(conn, self.where)
            found = await migrate(conn)
            await fill_old_states(conn, self._chains)
            await fill_old_stats(conn, self._chains)
        finally:
            await conn.close(timeout=self._settings.connect_timeout)
        await self._route_feed()
        self._pool = await open_pool(self._url, self._settings, self._pooling)
        logger.info(
            "serving from the database %s (schema found at version %d%s)",
            self.where,
            found,
            ", through a connection pooler" if self._pooling.pooled else "",
        )

    async def _route_feed(self) -> None:
        """Where the change feed listens: the direct URL when one is set (StartRefused if a pooler stands in front of
        it too), else the URL itself, where it only polls if that is a pooler's."""
        if self._direct_url is None:
            self._feed.route([(self._url, not self._pooling.pooled)])
            return
        try:
            conn = await connect(self._direct_url, self._settings)
        except DRIVER_ERRORS as exc:
            # Not reachable now: the feed tries it again, and polls through the URL meanwhile.
            logger.warning("FORKLOG_DATABASE_DIRECT_URL %s is not reachable (%s)", redact(self._direct_url), exc)
        else:
            try:
                if await behind_pooler(conn):
                    raise pooled_direct_url(redact(self._direct_url))
            finally:
                await conn.close(timeout=self._settings.connect_timeout)
        self._feed.route([(self._direct_url, True), (self._url, not self._pooling.pooled)])

    async def close(self) -> None:
        await self._watch.stop()
        await self._feed.stop()
        await self._doorbell.stop()
        await self._sweeper.stop()
        if self.replicas is not None:
            await self.replicas.close()
        await self._packer.stop()
        await self._vacuum.stop()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=self._settings.connect_timeout)
            except DRIVER_ERRORS:
                pool.terminate()

    async def readiness(self, tenant: str | None = None) -> Readiness:
        async with self._connection(Access.READ) as conn:
            if tenant is None:
                return Readiness(int(await conn.fetchval(queries.COUNT_SESSIONS)))
            return Readiness(int(await conn.fetchval(queries.COUNT_TENANT_SESSIONS, tenant)))

    def listen(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)
        if self._pool is not None:
            self._feed.start()

    @contextlib.asynccontextmanager
    async def _connection(self, access: Access) -> AsyncIterator[Connection]:
        """A connection for a read or a change: a standby's for a standby read (:mod:`app.backends.read_routing`)
        once it has replayed far enough, else the primary's; the driver's errors of what runs on it are translated
        (a change whose connection is lost once taken: its outcome is unknown)."""
        read = standby_read() if access is Access.READ and self.replicas is not None else None
        if read is not None and self.replicas is not None:
            async with self.replicas.connection(read) as standby:
                if standby is not None:
                    self.observer.standby_read("standby")
                    with database_errors(access):
                        yield standby
                    return
            self.observer.standby_read("primary")
        async with self._primary(access) as conn:
            yield conn

    async def _wal_position(self) -> int:
        """The primary's flushed WAL position: every change acknowledged so far committed at or before it."""
        async with self._primary(Access.READ) as conn:
            return int(await conn.fetchval(PRIMARY_POSITION))

    @contextlib.asynccontextmanager
    async def _primary(self, access: Access) -> AsyncIterator[Connection]:
        """A connection of the primary's pool (see :meth:`_connection`)."""
        pool = self._pool
        if pool is None:
            raise access.refused("the database is not connected yet")
        with database_errors(access, on_lost=self._watch.suspect) as attempt:
            async with pool.acquire(timeout=self._settings.acquire_timeout) as conn:
                attempt.sent = True
                yield conn

    async def _drop_connections(self) -> None:
        """The primary was lost: every connection to it is dropped now, those in use included (their requests
        answer 503), and the next ones are taken from whichever host is the primary by then (spec 6, Failover)."""
        old = self._pool
        # Connects on demand: never fails here.
        self._pool = await open_pool(self._url, self._settings, self._pooling, warm=False)
        if old is not None:
            old.terminate()

    def _changed(self, key: SessionKey, change_seq: int) -> None:
        """A change of this replica's committed: tell the others, and remember its number (the change feed does not
        report it back)."""
        self._doorbell.ring(key, change_seq)
        self._own.add(change_seq)
        self._own_order.append(change_seq)
        if len(self._own_order) > OWN_CHANGES_KEPT:
            self._own.discard(self._own_order.popleft())

    async def _notify(self, payloads: list[str]) -> None:
        async with self._connection(Access.CHANGE) as conn:
            await conn.fetchval(queries.NOTIFY, payloads)

    # -- reclaiming ------------------------------------------------------------------------------------------------

    async def sweep(self, *, grace_ms: int | None = None) -> int:
        """Reclaim the rows of logs deleted more than ``grace_ms`` ago that no live session reads; how many event
        rows went. (Runs by itself every ``sweep_interval`` seconds.)"""
        grace = self._orphan_grace_ms if grace_ms is None else grace_ms
        async with self._connection(Access.CHANGE) as conn:
            return await sweep_once(conn, now=self._clock(), grace_ms=grace)

    async def _sweep_once(self) -> None:
        try:
            reclaimed = await self.sweep()
        except StorageUnavailable:
            return
        except Exception:
            logger.exception("the sweep of deleted sessions' rows failed; it runs again later")
            return
        if reclaimed:
            logger.info("reclaimed %d events of deleted sessions", reclaimed)
