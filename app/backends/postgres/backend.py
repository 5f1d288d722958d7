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
import time
from collections.abc import Mapping, Sequence
from typing import Any

from app.backends.base import (
    IdempotencyRecord,
    Remember,
    Seed,
    SeedLog,
    SeedPrefix,
)
from app.backends.errors import Access, ChangeRefused, StaleHead, StorageUnavailable
from app.backends.postgres import queries
from app.backends.postgres.chains import Chain
from app.backends.postgres.core import COMMIT_SPAN, during
from app.backends.postgres.packs import Packs
from app.backends.postgres.quotas import bytes_without_created_at, check_quota, seed_bytes
from app.backends.postgres.reads import PostgresReads, session_of
from app.backends.postgres.rows import Rows
from app.backends.postgres.state import encode_state
from app.backends.postgres.tips import CachedTip
from app.domain.errors import SessionAlreadyExists
from app.domain.limits import NO_LIMITS
from app.domain.log import SessionLog
from app.domain.log_state import LogState
from app.domain.session import HEADER_FIELDS, Session, SessionHeader, SessionKey, head_of
from app.domain.sharing import Redaction, ShareRecord
from app.domain.staging import StagedEvents

__all__ = ["PostgresBackend"]

# Seeds longer than this are copied in with COPY before the create's statement (in its transaction).
COPY_EVENTS = 500
# Seconds a seed's COPY may take (a copied-in session of millions of events takes tens of seconds).
COPY_TIMEOUT = 900.0


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


def _share_of(row: Any) -> ShareRecord:
    return ShareRecord(
        id=row["id"],
        tenant=row["tenant"],
        session_id=row["session_id"],
        instance=row["instance"],
        digest=row["digest"],
        up_to=row["up_to"],
        redact=frozenset(Redaction(name) for name in row["redact"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
    )


class PostgresBackend(PostgresReads):
    """Sessions in the database at ``url``; ``open`` waits for it (retrying, unless ``wait`` is off: then it raises
    StorageUnavailable) and brings its schema up to date. Its lifecycle is :class:`~.core.PostgresCore`'s, its reads
    :class:`~.reads.PostgresReads`'; here are its changes."""

    # -- changes ---------------------------------------------------------------------------------------------------

    async def create(
        self, key: SessionKey, instance: str, lineage: Mapping[str, Any], seed: Seed, remember: Remember | None = None
    ) -> Session:
        if isinstance(seed, SeedLog):
            return await self._make(key, instance, lineage, seed.log, restored_at=None, remember=remember)
        return await self._fork(key, instance, lineage, seed, remember)

    async def restore(self, key: SessionKey, header: SessionHeader, log: SessionLog) -> Session:
        lineage = {field.attr: getattr(header, field.attr) for field in HEADER_FIELDS}
        return await self._make(
            key, header.instance, lineage, log, restored_at=header.created_at, remember=None, archived=header.archived
        )

    async def set_archived(
        self, key: SessionKey, instance: str, archived: bool, expected_count: int | None = None
    ) -> Session | None:
        self._tips.drop(key)  # its header changes: the next append reads the row again
        async with self._connection(Access.CHANGE) as conn, during(self.observer.durable_write(COMMIT_SPAN, 0)):
            row = await conn.fetchrow(queries.SET_ARCHIVED, key.tenant, key.id, instance, archived, expected_count)
        return session_of(key, row) if row is not None else None

    async def _make(
        self,
        key: SessionKey,
        instance: str,
        lineage: Mapping[str, Any],
        log: SessionLog,
        *,
        restored_at: int | None,
        remember: Remember | None,
        archived: bool = False,
    ) -> Session:
        rows = Rows.of_log(log)
        # The seed's ended turns go in as packs (compressed off the event loop when they are many), its open turn
        # as small rows.
        packs = await asyncio.to_thread(rows.take_packs) if len(log) > COPY_EVENTS else rows.take_packs()
        copied = len(rows.seqs) > COPY_EVENTS
        statement = queries.CREATE_SESSION if restored_at is None else queries.RESTORE_SESSION
        known = bytes_without_created_at(SessionHeader(id=key.id, created_at=0, instance=instance, **lineage))
        known += log.byte_size
        limits = self._limits_of(key.tenant) if restored_at is None else NO_LIMITS
        async with self._connection(Access.CHANGE) as conn, during(self.observer.durable_write(COMMIT_SPAN, len(log))):
            log_id = int(await conn.fetchval(queries.NEW_LOG_ID))
            atomic = conn.transaction() if copied or remember is not None or limits.quotas else contextlib.nullcontext()
            async with atomic:
                now = self._clock()
                stamp = len(str(now))  # the createdAt's digits
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
                    now if restored_at is None else restored_at,
                    *_lineage_params(lineage),
                    log_id,
                    len(log),
                    encode_state(log.state),
                    None,
                    0,
                    *rows.params(),
                    known,
                    now,
                    *packs.params(),
                    archived,
                )
                if made is None:
                    raise SessionAlreadyExists(key.id)
                header = SessionHeader(
                    id=key.id, created_at=made["created_at"], instance=instance, archived=archived, **lineage
                )
                session = Session(key, header, head_of(log.state), now)
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
        async with self._connection(Access.CHANGE) as conn, during(self.observer.durable_write(COMMIT_SPAN, 0)):
            log_id = int(await conn.fetchval(queries.NEW_LOG_ID))
            async with conn.transaction():
                source = await conn.fetchrow(queries.CLAIM_SOURCE, seed.source.tenant, seed.source.id, seed.instance)
                if source is None:
                    raise StaleHead(f'session "{seed.source.id}" is no longer the incarnation the fork was checked')
                if count > source["count"]:
                    raise ChangeRefused(f'session "{seed.source.id}" holds fewer events than the fork was checked on')
                parent: int | None = None
                chain: Chain | None = None
                if count > 0:
                    chain = await self._chains.get(conn, source["log"])
                    # The child reads its seed from the log that stores the seed's last event (and its parents):
                    # chains stay as short as the forks they are made of.
                    parent = chain.owner(count - 1)
                packs = Packs()
                if seed.then is not None:  # staged by the service on seed_tip: stored as they are
                    staged = Rows.of_staged(seed.then)
                    packs = staged.take_batch_packs()
                    state, rows, added = seed.then.state, staged.params(), len(seed.then.lines)
                else:
                    state, rows, added = LogState(), empty, 0
                    if chain is not None:
                        found = await self._seed_state(conn, chain, source, count)
                        if found is None:
                            raise ChangeRefused(
                                f"the fork's seed no longer ends at a stored turn/end (seq {count - 1})"
                            )
                        state = found
                # A fork counts its whole log (spec 14), measured now only when a bytes quota needs it.
                limits = self._limits_of(key.tenant)
                known: int | None = None
                if count == 0 or limits.max_bytes is not None:
                    known = await seed_bytes(conn, self._chains, source["log"], count)
                    child = SessionHeader(id=key.id, created_at=0, instance=instance, **lineage)
                    known += bytes_without_created_at(child) + added
                now = self._clock()
                await check_quota(conn, self._chains, key.tenant, limits, 1, (known or 0) + len(str(now)))
                made = await conn.fetchrow(
                    queries.CREATE_SESSION,
                    key.tenant,
                    key.id,
                    instance,
                    now,
                    *_lineage_params(lineage),
                    log_id,
                    state.count,
                    encode_state(state),
                    parent,
                    count if parent is not None else 0,
                    *rows,
                    known,
                    now,
                    *packs.params(),
                    False,
                )
                if made is None:
                    raise SessionAlreadyExists(key.id)
                header = SessionHeader(id=key.id, created_at=made["created_at"], instance=instance, **lineage)
                session = Session(key, header, head_of(state), now)
                if remember is not None:
                    await conn.execute(queries.INSERT_REMEMBERED, *_remembered_params(remember(session)))
        self._changed(key, made["change_seq"])
        if seed.then is not None and seed.then.checkpoints:
            self._packer.wake(log_id)
        return session

    async def append(self, key: SessionKey, staged: StagedEvents, remember: Sequence[IdempotencyRecord] = ()) -> None:
        cached = self._tips.get(key)
        if cached is None:
            # The tip this batch was staged on has left the cache: its log is unknown, so stage it again.
            raise StaleHead(f'session "{key.id}": the tip the batch was staged on is no longer cached')
        count = staged.base_count + len(staged.events)
        changed_at = self._clock()
        rows = Rows.of_staged(staged)
        packs = rows.take_batch_packs()
        params: list[Any] = [
            key.tenant,
            key.id,
            cached.log,
            count,
            encode_state(staged.state),
            staged.base_count,
            *rows.params(),
            changed_at,
            *packs.params(),
            cached.session.header.archived,
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
        except (StorageUnavailable, asyncio.CancelledError):
            self._tips.drop(key)  # the outcome is unknown (the database, or the request, went away): read the row next
            raise
        if row is None:
            raise StaleHead(f'session "{key.id}" moved (or was replaced) since the batch was staged')
        self.observer.synced(events, committed)
        self._changed(key, row["change_seq"])
        if staged.checkpoints:  # a turn ended: its small rows are packed now, in the background
            self._packer.wake(cached.log)
        session = Session(key, cached.session.header, head_of(staged.state), changed_at)
        self._tips.put(key, CachedTip(session, cached.log, staged.state))

    async def delete(self, key: SessionKey) -> None:
        self._tips.drop(key)
        async with self._connection(Access.CHANGE) as conn, during(self.observer.durable_write(COMMIT_SPAN, 0)):
            row = await conn.fetchrow(queries.DELETE_SESSION, key.tenant, key.id, self._clock())
        if row is not None:
            self._changed(key, row["change_seq"])

    async def forget(self, before: int) -> None:
        async with self._connection(Access.CHANGE) as conn:
            await conn.execute(queries.FORGET, before)

    # -- share links (spec 18) ---------------------------------------------------------------------------------------

    async def add_share(self, share: ShareRecord) -> None:
        async with self._connection(Access.CHANGE) as conn:
            await conn.execute(
                queries.INSERT_SHARE,
                share.id,
                share.tenant,
                share.session_id,
                share.instance,
                share.digest,
                share.up_to,
                sorted(share.redact),
                share.created_at,
                share.expires_at,
            )

    async def share_by_digest(self, digest: str) -> ShareRecord | None:
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.FIND_SHARE, digest)
        return _share_of(row) if row is not None else None

    async def shares_of(self, key: SessionKey) -> list[ShareRecord]:
        async with self._connection(Access.READ) as conn:
            rows = await conn.fetch(queries.SESSION_SHARES, key.tenant, key.id)
        return [_share_of(row) for row in rows]

    async def revoke_share(self, key: SessionKey, share_id: str) -> bool:
        async with self._connection(Access.CHANGE) as conn:
            row = await conn.fetchrow(queries.DELETE_SHARE, key.tenant, key.id, share_id)
        return row is not None
