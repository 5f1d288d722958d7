"""The PostgreSQL backend: sessions in one database that any number of forklog replicas share (spec section 6).

Nothing a request answers comes from this process's memory but what cannot go stale: every read asks the database
(read-your-writes from any replica), and the one cache, each session's rule state for checking appends
(:mod:`~app.backends.postgres.tips`), is only a guess that the append's own statement confirms (it is conditional on
the head: :class:`~app.backends.errors.StaleHead` otherwise). Changes are single statements or short transactions
that commit before they return (synchronous commit); a taken id (``SessionAlreadyExists``), a kept idempotency key
(``IdempotencyKeyTaken``) or a moved head rolls the whole change back. Every statement runs in :meth:`_connection`,
where the driver's errors are translated (:mod:`~app.backends.postgres.errors`). Forks share their prefix
(:mod:`~app.backends.postgres.chains`); deleted logs are reclaimed by a sweep (:mod:`~app.backends.postgres.sweep`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

import asyncpg
import orjson

from app.backends.base import (
    ChangeListener,
    IdempotencyRecord,
    LimitsOf,
    Readiness,
    Remember,
    Seed,
    SeedLog,
    SeedPrefix,
    Tip,
)
from app.backends.errors import Access, ChangeRefused, ReadFailed, StaleHead, StartRefused, StorageUnavailable
from app.backends.observer import NO_STORAGE_OBSERVER, StorageObserver
from app.backends.postgres import queries
from app.backends.postgres.chains import Chain, ChainCache
from app.backends.postgres.changes import Doorbell, ReplicaChanges
from app.backends.postgres.errors import DRIVER_ERRORS, database_errors
from app.backends.postgres.failover import PrimaryWatch
from app.backends.postgres.pool import Connection, PoolSettings, connect, open_pool, redact
from app.backends.postgres.quotas import bytes_without_created_at, check_quota, seed_bytes
from app.backends.postgres.rows import Rows, header_of_row
from app.backends.postgres.schema import migrate
from app.backends.postgres.state import decode_checkpoint, decode_state, encode_state, fork_state
from app.backends.postgres.sweep import sweep_once
from app.backends.postgres.tips import CachedTip, StoredTip, TipCache
from app.domain.errors import SessionAlreadyExists
from app.domain.events import LogState
from app.domain.history import SurfaceChange, fold_surface, project_message
from app.domain.ids import new_instance
from app.domain.limits import NO_LIMITS
from app.domain.listing import PageRequest
from app.domain.log import SessionLog, StagedEvents, replace_targets, stage
from app.domain.session import HEADER_FIELDS, Session, SessionHeader, SessionKey, head_of
from app.domain.summary import TITLE_TYPE, title_of

__all__ = ["PostgresBackend"]

logger = logging.getLogger("forklog.storage")

# Seeds longer than this are copied in with COPY before the create's statement (in its transaction).
COPY_EVENTS = 500
# Seconds a seed's COPY may take (a copied-in session of millions of events takes tens of seconds).
COPY_TIMEOUT = 900.0
# Events per piece of a snapshot's seed.
CHUNK_EVENTS = 20_000
# How long a deleted session's rows stay for snapshots still streaming them (the sweep reclaims them afterwards).
ORPHAN_GRACE_MS = 600_000
OWN_CHANGES_KEPT = 100_000
WARN_EVERY = 30.0  # seconds between warnings while a start waits for the database
# The name of a request's wait for its commit, in its trace.
COMMIT_SPAN = "forklog.storage.commit"


@contextlib.asynccontextmanager
async def _during(manager: contextlib.AbstractContextManager[object]) -> AsyncIterator[None]:
    """A plain context manager (a trace's span) held across awaits, beside a connection's ``async with``."""
    with manager:
        yield


# pg_try_advisory_xact_lock's key for the retention sweep (one replica sweeps at a time); any fixed 64-bit number.
RETENTION_LOCK = 0x666F726B6C6F6772  # "forklogr"


def _session_of(key: SessionKey, row: asyncpg.Record) -> Session:
    return Session(key, header_of_row(key.id, row), head_of(decode_state(row["state"], row["count"], [])))


def _lineage_params(lineage: Mapping[str, Any]) -> list[Any]:
    return [
        lineage.get("cwd"),
        lineage.get("parent_session"),
        lineage.get("seed_length"),
        lineage.get("origin"),
        lineage.get("delegation_depth", 0),
        lineage.get("agent_preset"),
    ]


def _remembered_params(record: IdempotencyRecord) -> list[Any]:
    return [
        record.tenant,
        record.key,
        record.fingerprint,
        record.status,
        record.location,
        record.body,
        record.created_at,
        record.session,
        record.instance,
        record.first_seq,
        record.end_seq,
    ]


class PostgresBackend:
    """Sessions in the database at ``url``; ``open`` waits for it (retrying, unless ``wait`` is off: then it raises
    StorageUnavailable) and brings its schema up to date."""

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
    ) -> None:
        self._url = url
        self._wait = wait
        self.observer: StorageObserver = NO_STORAGE_OBSERVER  # told of each append's commit
        self._clock = clock
        self._settings = pool or PoolSettings()
        self._poll_interval = poll_interval
        self._sweep_interval = sweep_interval
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
        self._sweeper: asyncio.Task[None] | None = None
        self._limits_of: LimitsOf = lambda tenant: NO_LIMITS

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
        self._sweeper = asyncio.create_task(self._sweep_now_and_then(), name="forklog-sweep")
        self._doorbell.start()
        self._watch.start()
        if self._listeners:
            self._feed.start()

    async def _connect(self) -> None:
        conn = await connect(self._url, self._settings)
        try:
            found = await migrate(conn)
        finally:
            await conn.close(timeout=self._settings.connect_timeout)
        self._pool = await open_pool(self._url, self._settings)
        logger.info("serving from the database %s (schema found at version %d)", self.where, found)

    async def close(self) -> None:
        await self._watch.stop()
        await self._feed.stop()
        await self._doorbell.stop()
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), timeout=self._settings.connect_timeout)
            except DRIVER_ERRORS:
                pool.terminate()

    async def readiness(self) -> Readiness:
        async with self._connection(Access.READ) as conn:
            return Readiness(int(await conn.fetchval(queries.COUNT_SESSIONS)))

    def listen(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)
        if self._pool is not None:
            self._feed.start()

    @contextlib.asynccontextmanager
    async def _connection(self, access: Access) -> AsyncIterator[Connection]:
        """A connection of the pool for a read or a change; the driver's errors of what runs on it are translated
        (a change whose connection is lost once taken: its outcome is unknown)."""
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
        self._pool = await open_pool(self._url, self._settings, warm=False)  # connects on demand: never fails here
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

    # -- reads -----------------------------------------------------------------------------------------------------

    async def find(self, key: SessionKey) -> Session | None:
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.FIND, key.tenant, key.id)
        return _session_of(key, row) if row is not None else None

    async def page(self, tenant: str, request: PageRequest) -> list[Session]:
        statement, params = queries.page_query(tenant, request)
        async with self._connection(Access.READ) as conn:
            rows = await conn.fetch(statement, *params)
        return [_session_of(SessionKey(tenant, row["id"]), row) for row in rows]

    async def read(self, key: SessionKey, start: int, stop: int) -> bytes:
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.READ_OWN, key.tenant, key.id, start, stop)
            if row is None:
                return b""
            stop = min(stop, row["count"])
            if start >= stop:
                return b""
            own_start = max(start, row["parent_count"])
            if row["n"] != max(0, stop - own_start):
                raise ReadFailed(f"events {own_start}..{stop - 1} of session {key.id!r} are not all stored")
            own = bytes(row["body"]) + b"\n" if row["n"] else b""
            if start >= row["parent_count"]:
                return own  # the whole range is the session's own rows: one statement
            chain = await self._chains.get(conn, row["log"])
            return await self._lines(conn, chain, start, min(stop, row["parent_count"])) + own

    async def _lines(self, conn: Connection, chain: Chain, start: int, stop: int) -> bytes:
        found = await conn.fetchrow(queries.LINES, *chain.arrays(start, stop))
        assert found is not None  # an aggregate always gives one row
        body, count = found
        if count != stop - start:
            raise ReadFailed(f"events {start}..{stop - 1} are no longer stored (reclaimed after a delete)")
        return bytes(body) + b"\n" if count else b""

    def chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]:
        # Events never change once stored, and a deleted incarnation's rows stay for ORPHAN_GRACE_MS: the pieces
        # read later are those of the moment of this call.
        return self._chunks(key, instance, stop)

    async def _chunks(self, key: SessionKey, instance: str, stop: int) -> AsyncIterator[bytes]:
        async with self._connection(Access.READ) as conn:
            log = await conn.fetchval(queries.INCARNATION_LOG, key.tenant, key.id, instance)
            if log is None:
                raise StaleHead(f'session "{key.id}" is no longer the incarnation the snapshot was checked against')
            chain = await self._chains.get(conn, log)
        for start in range(0, stop, CHUNK_EVENTS):
            async with self._connection(Access.READ) as conn:
                piece = await self._lines(conn, chain, start, min(stop, start + CHUNK_EVENTS))
            yield piece

    async def is_turn_end(self, key: SessionKey, seq: int) -> bool:
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.FIND, key.tenant, key.id)
            if row is None or not 0 <= seq < row["count"]:
                return False
            chain = await self._chains.get(conn, row["log"])
            return await conn.fetchrow(queries.TURN_END, chain.owner(seq), seq) is not None

    async def history(self, key: SessionKey, at_seq: int | None) -> list[Any]:
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.FIND, key.tenant, key.id)
            if row is None:
                return []
            count = row["count"]
            chain = await self._chains.get(conn, row["log"])
            if at_seq is None or at_seq >= count - 1:
                nodes = (await self._fresh(conn, key, row, chain)).state.nodes
            else:
                nodes = fold_surface(await self._surface(conn, chain, 0, at_seq + 1))
            events = await self._events_at(conn, chain, nodes)
        messages = []
        for seq in nodes:
            message = project_message(events[seq])
            if message is not None:
                messages.append(message)
        return messages

    async def _surface(self, conn: Connection, chain: Chain, start: int, stop: int) -> list[SurfaceChange]:
        rows = await conn.fetch(queries.SURFACE, *chain.arrays(start, stop))
        return [(row[0], row[1], row[2]) for row in rows]

    async def _events_at(self, conn: Connection, chain: Chain, seqs: Iterable[int]) -> dict[int, Any]:
        wanted = list(seqs)
        if not wanted:
            return {}
        rows = await conn.fetch(queries.EVENTS_AT, [chain.owner(seq) for seq in wanted], wanted)
        return {row["seq"]: orjson.loads(row["line"]) for row in rows}

    async def _fresh(self, conn: Connection, key: SessionKey, row: asyncpg.Record, chain: Chain) -> CachedTip:
        """The session's tip as ``row`` has it, the surface nodes caught up from the cached entry when it has them
        (only the surface rows after its seq are read), else rebuilt; kept in the cache."""
        count, log = row["count"], row["log"]
        cached = self._tips.get(key)
        if cached is not None and cached.log == log and cached.state.count <= count:
            nodes = list(cached.state.nodes)
            if cached.state.count < count:
                fold_surface(await self._surface(conn, chain, cached.state.count, count), nodes)
        else:
            nodes = fold_surface(await self._surface(conn, chain, 0, count))
        state = decode_state(row["state"], count, nodes)
        entry = CachedTip(Session(key, header_of_row(key.id, row), head_of(state)), log, state)
        self._tips.put(key, entry)
        return entry

    async def tip(self, key: SessionKey, wanted: Iterable[int] = (), *, refresh: bool = False) -> Tip | None:
        lookups = sorted(set(wanted))
        cached = self._tips.get(key)
        if cached is not None and not refresh:
            events: dict[int, Any] = {}
            known = [seq for seq in lookups if seq < cached.state.count]
            if known:
                async with self._connection(Access.READ) as conn:
                    events = await self._events_at(conn, await self._chains.get(conn, cached.log), known)
            return Tip(cached.session, StoredTip(cached.state, events), may_be_stale=True)
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.FIND, key.tenant, key.id)
            if row is None:
                self._tips.drop(key)
                return None
            chain = await self._chains.get(conn, row["log"])
            entry = await self._fresh(conn, key, row, chain)
            events = await self._events_at(conn, chain, [seq for seq in lookups if seq < entry.state.count])
        return Tip(entry.session, StoredTip(entry.state, events))

    # -- changes ---------------------------------------------------------------------------------------------------

    async def create(
        self, key: SessionKey, instance: str, lineage: Mapping[str, Any], seed: Seed, remember: Remember | None = None
    ) -> Session:
        if isinstance(seed, SeedLog):
            return await self._make(key, instance, lineage, seed.log, restored_at=None, remember=remember)
        return await self._fork(key, instance, lineage, seed, remember)

    async def restore(self, key: SessionKey, header: SessionHeader, log: SessionLog) -> Session:
        lineage = {field.attr: getattr(header, field.attr) for field in HEADER_FIELDS}
        return await self._make(key, header.instance, lineage, log, restored_at=header.created_at, remember=None)

    async def _make(
        self,
        key: SessionKey,
        instance: str,
        lineage: Mapping[str, Any],
        log: SessionLog,
        *,
        restored_at: int | None,
        remember: Remember | None,
    ) -> Session:
        rows = Rows.of_log(log)
        copied = len(log) > COPY_EVENTS
        statement = queries.CREATE_SESSION if restored_at is None else queries.RESTORE_SESSION
        known = bytes_without_created_at(SessionHeader(id=key.id, created_at=0, instance=instance, **lineage))
        known += log.byte_size
        limits = self._limits_of(key.tenant) if restored_at is None else NO_LIMITS
        async with self._connection(Access.CHANGE) as conn, _during(self.observer.durable_write(COMMIT_SPAN, len(log))):
            log_id = int(await conn.fetchval(queries.NEW_LOG_ID))
            atomic = conn.transaction() if copied or remember is not None or limits.quotas else contextlib.nullcontext()
            async with atomic:
                stamp = len(str(self._clock()))  # the createdAt's digits
                await check_quota(conn, self._chains, key.tenant, limits, 1, known + stamp)
                if copied:
                    seqs, lines = rows.take_events()
                    await conn.copy_records_to_table(
                        "forklog_events",
                        records=zip([log_id] * len(seqs), seqs, lines, strict=True),
                        columns=("log", "seq", "line"),
                        timeout=COPY_TIMEOUT,
                    )
                made = await conn.fetchrow(
                    statement,
                    key.tenant,
                    key.id,
                    instance,
                    self._clock() if restored_at is None else restored_at,
                    *_lineage_params(lineage),
                    log_id,
                    len(log),
                    encode_state(log.state),
                    None,
                    0,
                    *rows.params(),
                    known,
                )
                if made is None:
                    raise SessionAlreadyExists(key.id)
                header = SessionHeader(id=key.id, created_at=made["created_at"], instance=instance, **lineage)
                session = Session(key, header, head_of(log.state))
                if remember is not None:
                    await conn.execute(queries.INSERT_REMEMBERED, *_remembered_params(remember(session)))
        self._changed(key, made["change_seq"])
        self._tips.put(key, CachedTip(session, log_id, log.state))
        return session

    async def _fork(
        self, key: SessionKey, instance: str, lineage: Mapping[str, Any], seed: SeedPrefix, remember: Remember | None
    ) -> Session:
        count = seed.count
        empty: list[Any] = [[]] * 8
        async with self._connection(Access.CHANGE) as conn, _during(self.observer.durable_write(COMMIT_SPAN, 0)):
            log_id = int(await conn.fetchval(queries.NEW_LOG_ID))
            async with conn.transaction():
                source = await conn.fetchrow(queries.CLAIM_SOURCE, seed.source.tenant, seed.source.id, seed.instance)
                if source is None:
                    raise StaleHead(f'session "{seed.source.id}" is no longer the incarnation the fork was checked')
                if count > source["count"]:
                    raise ChangeRefused(f'session "{seed.source.id}" holds fewer events than the fork was checked on')
                parent: int | None = None
                state = LogState()
                chain: Chain | None = None
                if count > 0:
                    chain = await self._chains.get(conn, source["log"])
                    # The child reads its seed from the log that stores the seed's last event (and its parents):
                    # chains stay as short as the forks they are made of.
                    parent = chain.owner(count - 1)
                    turn_end = await conn.fetchrow(queries.TURN_END, parent, count - 1)
                    if turn_end is None:
                        raise ChangeRefused(f"the fork's seed no longer ends at a stored turn/end (seq {count - 1})")
                    point, body_bytes = decode_checkpoint(turn_end["checkpoint"])
                    whole = decode_state(source["state"], source["count"], [])
                    state = fork_state(count, turn_end["time"], point, body_bytes, whole)
                    if whole.title_seq is not None and whole.title_seq >= count:
                        state.title, state.title_seq = await self._last_title(conn, chain, count)
                rows = empty
                added = 0  # the bytes of the events appended after the seed
                if seed.then:
                    staged = await self._stage_after_seed(conn, chain, state, seed)
                    rows, state, added = Rows.of_staged(staged).params(), staged.state, len(staged.lines)
                # A fork counts its whole log (spec 14), measured now only when a bytes quota needs it.
                limits = self._limits_of(key.tenant)
                known: int | None = None
                if count == 0 or limits.max_bytes is not None:
                    known = await seed_bytes(conn, self._chains, source["log"], count)
                    child = SessionHeader(id=key.id, created_at=0, instance=instance, **lineage)
                    known += bytes_without_created_at(child) + added
                await check_quota(conn, self._chains, key.tenant, limits, 1, (known or 0) + len(str(self._clock())))
                made = await conn.fetchrow(
                    queries.CREATE_SESSION,
                    key.tenant,
                    key.id,
                    instance,
                    self._clock(),
                    *_lineage_params(lineage),
                    log_id,
                    state.count,
                    encode_state(state),
                    parent,
                    count if parent is not None else 0,
                    *rows,
                    known,
                )
                if made is None:
                    raise SessionAlreadyExists(key.id)
                header = SessionHeader(id=key.id, created_at=made["created_at"], instance=instance, **lineage)
                session = Session(key, header, head_of(state))
                if remember is not None:
                    await conn.execute(queries.INSERT_REMEMBERED, *_remembered_params(remember(session)))
        self._changed(key, made["change_seq"])
        return session

    async def _last_title(self, conn: Connection, chain: Chain, stop: int) -> tuple[str | None, int | None]:
        """The title of the last session/title event before ``stop``, and its seq."""
        for row in await conn.fetch(queries.TITLE_CANDIDATES, *chain.arrays(0, stop)):
            event = orjson.loads(row["line"])
            if event.get("type") == TITLE_TYPE:
                return title_of(event.get("data")), row["seq"]
        return None, None

    async def _stage_after_seed(
        self, conn: Connection, chain: Chain | None, state: LogState, seed: SeedPrefix
    ) -> StagedEvents:
        """A fork's ``events`` checked as an append to its seed (whose state is ``state``, nodes not included)."""
        events: dict[int, Any] = {}
        if chain is not None:
            state.nodes = fold_surface(await self._surface(conn, chain, 0, seed.count))
            wanted = [seq for seq in replace_targets(seed.then) if 0 <= seq < seed.count]
            events = await self._events_at(conn, chain, wanted)
        breaks = dict(seed.breaks) if seed.breaks else None
        return stage(StoredTip(state, events), seed.then, appended=True, now=seed.now, breaks=breaks)

    async def append(self, key: SessionKey, staged: StagedEvents, remember: Sequence[IdempotencyRecord] = ()) -> None:
        cached = self._tips.get(key)
        if cached is None:
            # The tip this batch was staged on has left the cache: its log is unknown, so stage it again.
            raise StaleHead(f'session "{key.id}": the tip the batch was staged on is no longer cached')
        count = staged.base_count + len(staged.events)
        params: list[Any] = [
            key.tenant,
            key.id,
            cached.log,
            count,
            encode_state(staged.state),
            staged.base_count,
            *Rows.of_staged(staged).params(),
        ]
        statement = queries.APPEND
        if remember:
            statement = queries.APPEND_REMEMBERING
            columns = list(zip(*(_remembered_params(record) for record in remember), strict=True))
            params.extend(list(column) for column in columns)
        events = len(staged.events)
        limits = self._limits_of(key.tenant)
        try:
            async with self._connection(Access.CHANGE) as conn:
                with self.observer.durable_write(COMMIT_SPAN, events):
                    started = time.perf_counter()
                    if limits.max_bytes is None:
                        row = await conn.fetchrow(statement, *params)
                    else:
                        async with conn.transaction():
                            await check_quota(conn, self._chains, key.tenant, limits, 0, len(staged.lines))
                            row = await conn.fetchrow(statement, *params)
                    committed = time.perf_counter() - started
        except StorageUnavailable:
            self._tips.drop(key)  # the outcome is unknown: the next tip reads the row
            raise
        if row is None:
            raise StaleHead(f'session "{key.id}" moved (or was replaced) since the batch was staged')
        self.observer.synced(events, committed)
        self._changed(key, row["change_seq"])
        session = Session(key, cached.session.header, head_of(staged.state))
        self._tips.put(key, CachedTip(session, cached.log, staged.state))

    async def delete(self, key: SessionKey) -> None:
        self._tips.drop(key)
        async with self._connection(Access.CHANGE) as conn, _during(self.observer.durable_write(COMMIT_SPAN, 0)):
            row = await conn.fetchrow(queries.DELETE_SESSION, key.tenant, key.id, self._clock())
        if row is not None:
            self._changed(key, row["change_seq"])

    async def tenants(self) -> list[str]:
        async with self._connection(Access.READ) as conn:
            return [row[0] for row in await conn.fetch(queries.TENANTS)]

    # -- idempotent retries ------------------------------------------------------------------------------------------

    async def recall(self, tenant: str, idempotency_key: str) -> IdempotencyRecord | None:
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.RECALL, tenant, idempotency_key)
        if row is None:
            return None
        return IdempotencyRecord(
            tenant=tenant,
            key=idempotency_key,
            fingerprint=row["fingerprint"],
            status=row["status"],
            location=row["location"],
            body=bytes(row["body"]),
            created_at=row["created_at"],
            session=row["session"],
            instance=row["instance"],
            first_seq=row["first_seq"],
            end_seq=row["end_seq"],
        )

    async def forget(self, before: int) -> None:
        async with self._connection(Access.CHANGE) as conn:
            await conn.execute(queries.FORGET, before)

    # -- reclaiming ------------------------------------------------------------------------------------------------

    async def sweep(self, *, grace_ms: int | None = None) -> int:
        """Reclaim the rows of logs deleted more than ``grace_ms`` ago that no live session reads; how many event
        rows went. (Runs by itself every ``sweep_interval`` seconds.)"""
        grace = self._orphan_grace_ms if grace_ms is None else grace_ms
        async with self._connection(Access.CHANGE) as conn:
            return await sweep_once(conn, now=self._clock(), grace_ms=grace)

    async def _sweep_now_and_then(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            try:
                reclaimed = await self.sweep()
            except StorageUnavailable:
                continue
            except Exception:
                logger.exception("the sweep of deleted sessions' rows failed; it runs again later")
                continue
            if reclaimed:
                logger.info("reclaimed %d events of deleted sessions", reclaimed)
