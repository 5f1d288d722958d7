"""The PostgreSQL backend's reads: sessions, pages of the list, events, snapshots' pieces, history, tips.

Nothing a read answers comes from this process's memory but what cannot go stale: every read asks the database
(read-your-writes from any replica). The one cache, each session's rule state for checking appends
(:mod:`~app.backends.postgres.tips`), is kept here by :meth:`PostgresReads._fresh`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Any

import asyncpg
import orjson

from app.backends.base import (
    IdempotencyRecord,
    Tip,
)
from app.backends.errors import Access, ReadFailed, StaleHead
from app.backends.postgres import queries
from app.backends.postgres.chains import Chain
from app.backends.postgres.core import PostgresCore
from app.backends.postgres.packs import assemble, events_in
from app.backends.postgres.pool import Connection
from app.backends.postgres.rows import header_of_row
from app.backends.postgres.state import decode_checkpoint, decode_state, fork_state
from app.backends.postgres.tips import CachedTip, StoredTip
from app.domain.history import SurfaceChange, fold_surface, project_message
from app.domain.listing import PageRequest
from app.domain.log_state import LogState
from app.domain.session import Session, SessionKey, head_of
from app.domain.staging import LogTip
from app.domain.summary import TITLE_TYPE, title_of

__all__ = ["PostgresReads", "session_of"]

# Events per piece of a snapshot's seed.
CHUNK_EVENTS = 20_000
# Events read at a time when looking back for a session's last title.
TITLE_WINDOW = 4096


def session_of(key: SessionKey, row: asyncpg.Record) -> Session:
    state = decode_state(row["state"], row["count"], [])
    return Session(key, header_of_row(key.id, row), head_of(state), row["changed_at"])


class PostgresReads(PostgresCore):
    """The reads of :class:`~app.backends.postgres.backend.PostgresBackend`."""

    # -- reads -----------------------------------------------------------------------------------------------------

    async def find(self, key: SessionKey) -> Session | None:
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.FIND, key.tenant, key.id)
        return session_of(key, row) if row is not None else None

    async def page(self, tenant: str, request: PageRequest) -> list[Session]:
        statement, params = queries.page_query(tenant, request)
        async with self._connection(Access.READ) as conn:
            rows = await conn.fetch(statement, *params)
        return [session_of(SessionKey(tenant, row["id"]), row) for row in rows]

    async def read(self, key: SessionKey, start: int, stop: int) -> bytes:
        async with self._connection(Access.READ) as conn:
            rows = await conn.fetch(queries.READ_OWN, key.tenant, key.id, start, stop)
            if not rows:
                return b""
            head = rows[0]
            stop = min(stop, head["count"])
            if start >= stop:
                return b""
            own_start = max(start, head["parent_count"])
            own, found = assemble(rows, own_start, stop) if own_start < stop else (b"", 0)
            if found != max(0, stop - own_start):
                raise ReadFailed(f"events {own_start}..{stop - 1} of session {key.id!r} are not all stored")
            if start >= head["parent_count"]:
                return own  # the whole range is the session's own rows: one statement
            chain = await self._chains.get(conn, head["log"])
            return await self._lines(conn, chain, start, min(stop, head["parent_count"])) + own

    async def _lines(self, conn: Connection, chain: Chain, start: int, stop: int) -> bytes:
        if start >= stop:
            return b""
        body, count = assemble(await conn.fetch(queries.LINES, *chain.arrays(start, stop)), start, stop)
        if count != stop - start:
            raise ReadFailed(f"events {start}..{stop - 1} are no longer stored (reclaimed after a delete)")
        return body

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
        parts = await conn.fetch(queries.EVENTS_AT, [chain.owner(seq) for seq in wanted], wanted)
        return {seq: orjson.loads(line) for seq, line in events_in(parts, wanted).items()}

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
        entry = CachedTip(Session(key, header_of_row(key.id, row), head_of(state), row["changed_at"]), log, state)
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

    async def seed_tip(
        self, source: SessionKey, instance: str, count: int, wanted: Iterable[int] = ()
    ) -> LogTip | None:
        # Read outside the fork's transaction, and safe so: the first ``count`` events of an incarnation (up to a
        # turn/end) never change while it is live, and the fork's transaction claims the source again (CLAIM_SOURCE:
        # this incarnation, at least ``count`` events) before it stores the batch staged on this tip.
        async with self._connection(Access.READ) as conn:
            row = await conn.fetchrow(queries.FIND, source.tenant, source.id)
            if row is None or row["instance"] != instance:
                return None
            if count > row["count"]:
                raise ReadFailed(f'session "{source.id}" holds fewer events than the fork was checked on')
            if count == 0:
                return StoredTip(LogState(), {})
            chain = await self._chains.get(conn, row["log"])
            state = await self._seed_state(conn, chain, row, count)
            if state is None:
                raise ReadFailed(f"the fork's seed no longer ends at a stored turn/end (seq {count - 1})")
            state.nodes = fold_surface(await self._surface(conn, chain, 0, count))
            events = await self._events_at(conn, chain, [seq for seq in set(wanted) if 0 <= seq < count])
        return StoredTip(state, events)

    async def _seed_state(self, conn: Connection, chain: Chain, source: asyncpg.Record, count: int) -> LogState | None:
        """The state after the first ``count`` events (``count`` > 0) of the log ``chain`` whose session row is
        ``source`` (surface nodes not included), from the checkpoint of its turn/end; None if no turn/end is stored
        at ``count - 1``."""
        turn_end = await conn.fetchrow(queries.TURN_END, chain.owner(count - 1), count - 1)
        if turn_end is None:
            return None
        point, body_bytes = decode_checkpoint(turn_end["checkpoint"])
        whole = decode_state(source["state"], source["count"], [])
        state = fork_state(count, turn_end["time"], point, body_bytes, whole)
        if whole.title_seq is not None and whole.title_seq >= count:
            state.title, state.title_seq = await self._last_title(conn, chain, count)
        return state

    async def _last_title(self, conn: Connection, chain: Chain, stop: int) -> tuple[str | None, int | None]:
        """The title of the last session/title event before ``stop``, and its seq (read backwards, a window at a
        time: the title is most often near the end)."""
        while stop > 0:
            start = max(0, stop - TITLE_WINDOW)
            lines = (await self._lines(conn, chain, start, stop)).split(b"\n")[:-1]
            for offset in range(len(lines) - 1, -1, -1):
                line = lines[offset]
                if b'"session/title"' not in line:
                    continue  # the name may also stand in a message's text: parsed to confirm
                event = orjson.loads(line)
                if event.get("type") == TITLE_TYPE:
                    return title_of(event.get("data")), start + offset
            stop = start
        return None, None

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
