"""The store made durable: every change is written (and synced) before the domain store commits it.

All operations on one session id are serialized by an asyncio lock; the work of each change runs in a task of its
own, so a client that disconnects mid-request can never leave the disk and the memory disagreeing. Appends to one
session that arrive while its previous group is being written wait together and become its next group: one write,
one sync, one commit, each append answered on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from app.domain.errors import ErrorCode, SessionError
from app.domain.log import StagedEvents, chain
from app.domain.store import (
    PendingAppend,
    PendingCreate,
    Session,
    SessionHeader,
    SessionStore,
    SessionView,
    build_seed_log,
)
from app.persistence.files import AlreadyOnDisk, CorruptFile, Recovery

T = TypeVar("T")
AppendResult = tuple[list[dict[str, Any]], bytes, SessionView]

# Seeds larger than this are checked off the event loop.
SEED_EVENTS_CHECKED_INLINE = 1000


class Journal(Protocol):
    """Where sessions are kept: the file backend, or the in-memory twin used by tests."""

    async def create(self, header: SessionHeader, lines: bytes | memoryview) -> None: ...
    async def append(self, session_id: str, lines: bytes, *, instance: str) -> None: ...
    async def delete(self, session_id: str) -> None: ...
    def recover(self) -> Recovery: ...
    def save_indexes(self, sessions: Iterable[Session]) -> None: ...
    def close(self) -> None: ...


class MemoryJournal:
    """A journal that keeps nothing: the store alone, for tests of the layers above."""

    async def create(self, header: SessionHeader, lines: bytes | memoryview) -> None:
        return None

    async def append(self, session_id: str, lines: bytes, *, instance: str) -> None:
        return None

    async def delete(self, session_id: str) -> None:
        return None

    def recover(self) -> Recovery:
        return Recovery()

    def save_indexes(self, sessions: Iterable[Session]) -> None:
        return None

    def close(self) -> None:
        return None


@dataclass(slots=True)
class _WaitingAppend:
    events: Sequence[Any]
    expected_seq: int | None
    instance: str | None
    breaks: dict[int, str] | None
    answer: asyncio.Future[AppendResult]

    def succeed(self, result: AppendResult) -> None:
        if not self.answer.done():
            self.answer.set_result(result)

    def fail(self, error: Exception) -> None:
        if not self.answer.done():
            self.answer.set_exception(error)


class DurableStore:
    def __init__(self, journal: Journal, store: SessionStore | None = None) -> None:
        self.journal = journal
        self.store = store if store is not None else SessionStore()
        self.ready = False
        self.corrupt: list[CorruptFile] = []
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        # Appends waiting for their session's next group; a session is in here while its drainer runs.
        self._waiting_appends: dict[str, list[_WaitingAppend]] = {}
        self._drainers: set[asyncio.Future[None]] = set()

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
        return await asyncio.shield(self._start_serialized(session_id, work))

    def _start_serialized(self, session_id: str, work: Callable[[], Awaitable[T]]) -> asyncio.Future[T]:
        """The task that runs ``work`` alone among the operations on ``session_id``."""
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

        return asyncio.ensure_future(run())

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
    ) -> AppendResult:
        """Append a batch; return the stored events, their JSONL bytes and the session after the append.

        Appends to one session that arrive while its previous group is being written form the next group: each is
        checked as if the ones before it were in the log, and the group is written and synced once.
        """
        waiting = _WaitingAppend(events, expected_seq, instance, breaks, asyncio.get_running_loop().create_future())
        queue = self._waiting_appends.get(session_id)
        if queue is not None:
            queue.append(waiting)
        else:
            self._waiting_appends[session_id] = [waiting]
            self._start_drainer(session_id)
        return await asyncio.shield(waiting.answer)

    async def _drain_appends(self, session_id: str) -> None:
        """Write the appends waiting for ``session_id`` as one group; those that arrive meanwhile form the next."""
        group = self._waiting_appends.get(session_id, [])
        self._waiting_appends[session_id] = []
        try:
            await self._append_group(session_id, group)
        except BaseException as exc:  # a bug, or cancellation: answer every append of the group all the same
            for waiting in group:
                waiting.fail(exc if isinstance(exc, Exception) else RuntimeError("the append was cancelled"))
            if not isinstance(exc, Exception):
                raise
        finally:
            if self._waiting_appends.get(session_id):
                # The next group queues on the session's lock like any operation: a delete or a fork waiting
                # there goes first, so a stream of appends cannot starve it.
                self._start_drainer(session_id)
            else:
                self._waiting_appends.pop(session_id, None)

    def _start_drainer(self, session_id: str) -> None:
        drainer = self._start_serialized(session_id, lambda: self._drain_appends(session_id))
        self._drainers.add(drainer)
        drainer.add_done_callback(self._drainers.discard)

    async def _append_group(self, session_id: str, group: list[_WaitingAppend]) -> None:
        accepted: list[tuple[_WaitingAppend, StagedEvents]] = []
        combined: StagedEvents | None = None
        session: Session | None = None
        for waiting in group:
            try:
                pending = self.store.prepare_append(
                    session_id,
                    waiting.events,
                    expected_seq=waiting.expected_seq,
                    instance=waiting.instance,
                    breaks=waiting.breaks,
                    after=combined,
                )
            except SessionError as refused:  # this append alone is refused; the others go on
                waiting.fail(refused)
                continue
            session = pending.session
            accepted.append((waiting, pending.staged))
            combined = pending.staged if combined is None else chain(combined, pending.staged)
        if combined is None or session is None:
            return
        try:
            await self.journal.append(session_id, combined.lines, instance=session.header.instance)
        except Exception as refused:
            for waiting, _ in accepted:
                waiting.fail(refused)
            return
        self.store.commit_append(PendingAppend(session, combined))
        for waiting, staged in accepted:
            waiting.succeed((staged.events, staged.lines, session.view_at(staged.state)))

    async def fork(
        self,
        source_id: str,
        *,
        child_id: str | None = None,
        at_seq: int | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
    ) -> SessionView:
        child = child_id if child_id is not None else self.store.new_id()

        async def work() -> SessionView:
            pending = self.store.prepare_fork(
                source_id, child_id=child, at_seq=at_seq, instance=instance, expected_seq=expected_seq
            )
            return await self._persist_create(pending)

        return await self._serialized(child, work)

    async def delete(self, session_id: str) -> None:
        async def work() -> None:
            self.store.prepare_delete(session_id)
            await self.journal.delete(session_id)
            self.store.commit_delete(session_id)

        await self._serialized(session_id, work)

    # -- reads -----------------------------------------------------------------------------------------------------

    def get(self, session_id: str) -> Session:
        return self.store.get(session_id)

    def close(self) -> None:
        """At a clean shutdown: index the live sessions for a fast next start, then release the journal."""
        if self.ready:
            self.journal.save_indexes(self.store.sessions())
        self.journal.close()
