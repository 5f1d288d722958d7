"""The store made durable: every change is written (and synced) before the domain store commits it.

All operations on one session id are serialized by an asyncio lock; the work of each change runs in a shielded
task, so a client that disconnects mid-request can never leave the disk and the memory disagreeing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

from app.domain.errors import ErrorCode, SessionError
from app.domain.store import PendingCreate, Session, SessionHeader, SessionStore, SessionView, Snapshot, build_seed_log
from app.persistence.files import AlreadyOnDisk, CorruptFile, Recovery

T = TypeVar("T")

# Seeds larger than this are checked off the event loop.
SEED_EVENTS_CHECKED_INLINE = 1000


class Journal(Protocol):
    """Where sessions are kept: the file backend, or the in-memory twin used by tests."""

    async def create(self, header: SessionHeader, lines: bytes | memoryview) -> None: ...
    async def append(self, session_id: str, lines: bytes) -> None: ...
    async def delete(self, session_id: str) -> None: ...
    def recover(self) -> Recovery: ...
    def save_indexes(self, sessions: Iterable[Session]) -> None: ...
    def close(self) -> None: ...


class MemoryJournal:
    """A journal that keeps nothing: the store alone, for tests of the layers above."""

    async def create(self, header: SessionHeader, lines: bytes | memoryview) -> None:
        return None

    async def append(self, session_id: str, lines: bytes) -> None:
        return None

    async def delete(self, session_id: str) -> None:
        return None

    def recover(self) -> Recovery:
        return Recovery()

    def save_indexes(self, sessions: Iterable[Session]) -> None:
        return None

    def close(self) -> None:
        return None


class DurableStore:
    def __init__(self, journal: Journal, store: SessionStore | None = None) -> None:
        self.journal = journal
        self.store = store if store is not None else SessionStore()
        self.ready = False
        self.corrupt: list[CorruptFile] = []
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def recover(self) -> None:
        """Load every session from the journal; afterwards the store is ready."""
        recovery = await asyncio.to_thread(self.journal.recover)
        for recovered in sorted(recovery.sessions, key=lambda r: (r.session.header.created_at, r.session.id)):
            self.store.adopt(recovered.session)
        for corrupt in recovery.corrupt:
            if corrupt.names_session:
                self.store.quarantine(corrupt.id, corrupt.reason, created_at=corrupt.created_at)
        self.corrupt = recovery.corrupt
        self.ready = True

    async def _serialized(self, session_id: str, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` alone among the operations on ``session_id``, to the end even if the caller goes away."""
        lock, users = self._locks.get(session_id, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[session_id] = (lock, users + 1)

        async def run() -> T:
            try:
                async with lock:
                    return await work()
            finally:
                held, remaining = self._locks[session_id]
                if remaining <= 1:
                    del self._locks[session_id]
                else:
                    self._locks[session_id] = (held, remaining - 1)

        return await asyncio.shield(asyncio.ensure_future(run()))

    async def _persist_create(self, pending: PendingCreate) -> SessionView:
        session = pending.session
        body = session.log.body_view()  # the new session is not live yet: nothing appends while it is written
        try:
            await self.journal.create(session.header, body)
        except AlreadyOnDisk:
            self.store.abort_create(pending)
            raise SessionError(
                ErrorCode.SESSION_ALREADY_EXISTS, f'session "{session.id}" already exists; pick another id'
            ) from None
        except BaseException:
            self.store.abort_create(pending)
            raise
        finally:
            body.release()
        return self.store.commit_create(pending).view()

    # -- changes ---------------------------------------------------------------------------------------------------

    async def create(
        self,
        session_id: str | None,
        seed: Sequence[Any] | None,
        meta: dict[str, Any] | None,
        *,
        seed_breaks: dict[int, str] | None = None,
    ) -> SessionView:
        async def work() -> SessionView:
            seed_log = None
            if seed is not None and len(seed) > SEED_EVENTS_CHECKED_INLINE:
                # A large seed is checked in a worker thread so that the event loop keeps serving meanwhile; the
                # cheap checks (meta syntax, id live, meta values) still come first, in the contract's order.
                self.store.check_create(session_id, seed, meta)
                seed_log = await asyncio.to_thread(build_seed_log, seed, now=self.store.now(), breaks=seed_breaks)
            pending = self.store.prepare_create(session_id, seed, meta, seed_breaks=seed_breaks, seed_log=seed_log)
            return await self._persist_create(pending)

        if session_id is None:
            session_id = self.store.new_id()
        return await self._serialized(session_id, work)

    async def append(
        self,
        session_id: str,
        events: Sequence[Any],
        *,
        expected_seq: int | None = None,
        instance: str | None = None,
        breaks: dict[int, str] | None = None,
    ) -> tuple[list[dict[str, Any]], bytes, SessionView]:
        """Append a batch; return the stored events, their JSONL bytes and the session after the append."""

        async def work() -> tuple[list[dict[str, Any]], bytes, SessionView]:
            pending = self.store.prepare_append(
                session_id, events, expected_seq=expected_seq, instance=instance, breaks=breaks
            )
            await self.journal.append(session_id, pending.staged.lines)
            self.store.commit_append(pending)
            return pending.staged.events, pending.staged.lines, pending.session.view()

        return await self._serialized(session_id, work)

    async def fork(
        self,
        source_id: str,
        *,
        child_id: str | None = None,
        at_seq: int | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
    ) -> SessionView:
        def prepare() -> PendingCreate:
            return self.store.prepare_fork(
                source_id, child_id=child_id, at_seq=at_seq, instance=instance, expected_seq=expected_seq
            )

        if child_id is None:
            pending = prepare()
            return await self._serialized(pending.session.id, lambda: self._persist_create(pending))

        async def work() -> SessionView:
            return await self._persist_create(prepare())

        return await self._serialized(child_id, work)

    async def delete(self, session_id: str) -> None:
        async def work() -> None:
            self.store.prepare_delete(session_id)
            await self.journal.delete(session_id)
            self.store.commit_delete(session_id)

        await self._serialized(session_id, work)

    # -- reads -----------------------------------------------------------------------------------------------------

    def get(self, session_id: str) -> Session:
        return self.store.get(session_id)

    def snapshot(
        self,
        session_id: str,
        *,
        at_seq: int | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
    ) -> Snapshot:
        return self.store.snapshot(session_id, at_seq=at_seq, instance=instance, expected_seq=expected_seq)

    def close(self) -> None:
        """At a clean shutdown: index the live sessions for a fast next start, then release the journal."""
        if self.ready:
            self.journal.save_indexes(self.store.sessions())
        self.journal.close()
