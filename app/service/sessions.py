"""The spec's operations on sessions, over one storage backend: this facade's life cycle, creates, appends, deletes and
idempotent retries, with the reads (:mod:`app.service.reads`) and the snapshot and fork (:mod:`app.service.forks`)
handed out from their own services.

Each operation checks what the contract says, in the contract's order (spec 2.3: readiness, then the session's
existence and liveness, then the seed, the boundary or the events), and then asks the backend for the change.
Operations that change one session run one at a time (per session, in this process; a shared backend refuses a
change staged on a head another process moved, and the change is checked again). The work of a change runs to its
end even if the client goes away, so the store never keeps half of one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from app.backends.base import Backend, LimitsOf, Readiness, SeedLog
from app.backends.errors import SessionCorrupt, StorageUnavailable
from app.domain.clock import wall_clock_ms
from app.domain.dsh_records import header_bytes
from app.domain.errors import SessionAlreadyExists
from app.domain.ids import check_id, new_instance, new_session_id
from app.domain.interrupt import closers_for
from app.domain.limits import NO_LIMITS, TenantLimits
from app.domain.log import seed_log
from app.domain.session import Session, SessionHeader, SessionKey, check_live, check_meta
from app.service.appends import Appended, AppendQueue, BatchWriter
from app.service.changes import ChangeFeed
from app.service.errors import NotReady
from app.service.forks import Forks, Snapshot
from app.service.idempotency import (
    NO_ANSWERS,
    Answer,
    ChangeAnswers,
    IdempotencyGate,
    IdempotentChange,
    IdempotentRequest,
    Operation,
)
from app.service.idle_turns import IdleTurns
from app.service.locks import KeyedLocks
from app.service.observer import NO_SESSION_OBSERVER, SessionObserver
from app.service.quotas import QuotaLedger
from app.service.reads import Deleted, Lineage, SessionReads, TailEvents, find_live
from app.service.retention import Retention, is_expired
from app.service.search import Searcher

__all__ = [
    "Appended",
    "Deleted",
    "Lifecycle",
    "Lineage",
    "SessionService",
    "Snapshot",
    "TailEvents",
]

logger = logging.getLogger("forklog.service")

# Seeds larger than this are checked off the event loop.
SEED_EVENTS_CHECKED_INLINE = 1000
# How long a live tail waits without news before it looks at its session again (the backend reports every change;
# this only bounds what a lost report could cost).
TAIL_RECHECK_SECONDS = 30.0


class Lifecycle(Enum):
    STARTING = "starting"  # the backend is opening (recovering, connecting): session routes answer NOT_READY
    READY = "ready"  # serving
    FAILED = "failed"  # opening failed with a bug: the service stays NOT_READY (the log says why)
    STOPPED = "stopped"  # closed at shutdown


class SessionService:
    def __init__(
        self,
        backend: Backend,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        new_id: Callable[[], str] = new_session_id,
        instance: Callable[[], str] = new_instance,
        observer: SessionObserver = NO_SESSION_OBSERVER,
        tenant_limits: Callable[[], Mapping[str, TenantLimits]] = dict,
        search_index: Path | None = None,
        answers: ChangeAnswers = NO_ANSWERS,
        interrupt_after_ms: int | None = None,
    ) -> None:
        """``answers`` says how a change reads as its answer (the API's wire format): an idempotent change's answer
        is kept with it."""
        self.backend = backend
        self.observer = observer
        # Each tenant's limits as they are now (spec 14: the keys file may change them at any time).
        self.tenant_limits = tenant_limits

        def limits_of(tenant: str) -> TenantLimits:
            return tenant_limits().get(tenant, NO_LIMITS)

        self.limits_of: LimitsOf = limits_of
        # Quotas (spec 14): a shared backend checks them in its transactions, a local one is counted here.
        self.quotas: QuotaLedger | None = None
        capabilities = backend.capabilities
        if capabilities.enforces_quotas is not None:
            capabilities.enforces_quotas.enforce_quotas(limits_of)
        elif capabilities.counts_locally is not None:
            self.quotas = QuotaLedger(capabilities.counts_locally, limits_of)
        self._clock = clock
        self._new_id = new_id
        self._new_instance = instance
        self.lifecycle = Lifecycle.STARTING
        self._locks: KeyedLocks[SessionKey] = KeyedLocks()
        self.changes = ChangeFeed()
        writer = BatchWriter(backend, quotas=self.quotas, clock=clock, changes=self.changes, observer=observer)
        self._appends: AppendQueue[Appended] = AppendQueue(self._locks, writer.write)
        self.idempotency = IdempotencyGate(backend, clock, answers)
        self.retention = Retention(backend, tenant_limits, clock, self._expire)
        # Spec 17: idle open turns closed by the service itself, when the setting asks for it.
        self.idle_turns = (
            IdleTurns(backend, interrupt_after_ms, clock, self._interrupt_idle) if interrupt_after_ms else None
        )
        self.searcher = Searcher(backend, search_index)
        self.changes.watchers.append(self.searcher.changed)
        backend.listen(self.changes.changed)
        self.reads = SessionReads(
            backend,
            require_ready=self._require_ready,
            changes=self.changes,
            retention=self.retention,
            searcher=self.searcher,
            observer=observer,
        )
        self.forks = Forks(
            backend,
            require_ready=self._require_ready,
            locks=self._locks,
            quotas=self.quotas,
            clock=clock,
            new_id=new_id,
            new_instance=instance,
            changes=self.changes,
            observer=observer,
            searcher=self.searcher,
        )

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the backend; the service is ready once it has (NOT_READY until then)."""
        try:
            await self.backend.open()
        except Exception:
            self.lifecycle = Lifecycle.FAILED
            logger.critical("the store failed to open; the service stays NOT_READY", exc_info=True)
            raise
        self.lifecycle = Lifecycle.READY
        self.searcher.start()
        self.idempotency.start_sweeping()
        self.retention.start()
        if self.idle_turns is not None:
            self.idle_turns.start()
        self.changes.start_rechecks(TAIL_RECHECK_SECONDS)

    def stopping(self) -> None:
        """The server begins to shut down: live tails and long-polls end now, so that nothing waits for them."""
        self.changes.close()

    async def stop(self) -> None:
        """Finish the appends handed over, then close the backend."""
        was_ready = self.lifecycle is Lifecycle.READY
        self.lifecycle = Lifecycle.STOPPED
        self.changes.close()
        await self.idempotency.stop_sweeping()
        await self.retention.stop()
        if self.idle_turns is not None:
            await self.idle_turns.stop()
        if was_ready:
            await self._appends.drained()
        await self.searcher.stop()
        await self.backend.close()

    @property
    def ready(self) -> bool:
        return self.lifecycle is Lifecycle.READY

    def _require_ready(self) -> None:
        if self.lifecycle is not Lifecycle.READY:
            raise NotReady()

    async def idempotently(self, request: IdempotentRequest | None, operation: Operation) -> tuple[Answer, bool]:
        """Run a create, append or fork at most once per ``Idempotency-Key`` (spec 8): its answer (with a key, the
        one kept with it), or the answer kept for an earlier request with the key (then True). Readiness is checked
        first, the key's state next."""
        self._require_ready()
        answer, replayed = await self.idempotency.run(request, operation)
        if replayed and request is not None:
            self.observer.replayed(request.tenant)
        return answer, replayed

    async def readiness(self, tenant: str | None = None) -> Readiness:
        """The live and the corrupt sessions of every tenant, or of ``tenant`` only."""
        self._require_ready()
        try:
            return await self.backend.readiness(tenant)
        except StorageUnavailable:  # a database that went away: not ready until it is back
            raise NotReady("the store cannot be reached; retry in a moment") from None

    async def create(
        self,
        tenant: str,
        session_id: str | None,
        seed: Sequence[Any] | None,
        meta: dict[str, Any] | None,
        *,
        seed_breaks: dict[int, str] | None = None,
        change: IdempotentChange | None = None,
    ) -> Session:
        """A new session from ``seed`` with ``meta`` (its keys already checked): id taken, then meta, then seed.
        ``change`` keeps its idempotency record with it."""
        self._require_ready()
        if session_id is not None:
            check_id(session_id)
        key = SessionKey(tenant, session_id if session_id is not None else self._new_id())
        created = await self._locks.run(key, lambda: self._create(key, seed, meta or {}, seed_breaks, change))
        self.changes.changed(key)
        self.observer.created(tenant)
        return created

    async def _create(
        self,
        key: SessionKey,
        seed: Sequence[Any] | None,
        meta: dict[str, Any],
        breaks: dict[int, str] | None,
        change: IdempotentChange | None,
    ) -> Session:
        if await self.backend.find(key) is not None:
            raise SessionAlreadyExists(key.id)
        lineage = check_meta(meta, len(seed) if seed is not None else 0)
        if seed is not None and len(seed) > SEED_EVENTS_CHECKED_INLINE:
            # A large seed is checked in a worker thread so that the event loop keeps serving meanwhile.
            log = await asyncio.to_thread(
                seed_log, seed, now=self._clock(), breaks=breaks, seed_length=lineage.get("seed_length")
            )
        else:
            log = seed_log(seed, now=self._clock(), breaks=breaks, seed_length=lineage.get("seed_length"))
        instance = self._new_instance()
        remember = change.created if change is not None else None

        def make() -> Awaitable[Session]:
            return self.backend.create(key, instance, lineage, SeedLog(log), remember)

        if self.quotas is None:
            return await make()
        body = log.byte_size
        size = header_bytes(SessionHeader(key.id, self._clock(), instance, **lineage)) + body
        return await self.quotas.charged(key.tenant, 1, size, make, lambda made: header_bytes(made.header) + body)

    # -- append ----------------------------------------------------------------------------------------------------

    def append(
        self,
        key: SessionKey,
        events: Sequence[Any],
        *,
        expected_seq: int | None = None,
        instance: str | None = None,
        breaks: dict[int, str] | None = None,
        change: IdempotentChange | None = None,
    ) -> Coroutine[Any, Any, Appended]:
        """Append a batch (atomically: all of it is stored, or none). Appends to one session that arrive while its
        previous batch is written are checked and written together (see :mod:`app.service.appends`); ``change``
        keeps its idempotency record with the events. A plain function handing on the queue's coroutine: an append
        waiting on its sync passes one frame fewer each time it is suspended and resumed."""
        self._require_ready()
        return self._appends.submit(
            key,
            events,
            expected_seq=expected_seq,
            instance=instance,
            breaks=breaks,
            record=change.appended if change is not None else None,
            claimed=change.slot if change is not None else None,
        )

    def interrupt(
        self,
        key: SessionKey,
        *,
        expected_seq: int | None = None,
        instance: str | None = None,
        change: IdempotentChange | None = None,
    ) -> Coroutine[Any, Any, Appended]:
        """Close the session's open turn as DSH closes an abandoned one (spec 17): its closers appended as one batch,
        made from the log they follow when the batch is checked; NOT_IN_TURN when no turn is open."""
        self._require_ready()
        return self._appends.submit(
            key,
            (),
            expected_seq=expected_seq,
            instance=instance,
            breaks=None,
            record=change.appended if change is not None else None,
            claimed=change.slot if change is not None else None,
            compose=closers_for,
        )

    async def _interrupt_idle(self, key: SessionKey, expected_seq: int, instance: str) -> Appended:
        return await self.interrupt(key, expected_seq=expected_seq, instance=instance)

    # -- archive ---------------------------------------------------------------------------------------------------

    async def set_archived(
        self, key: SessionKey, archived: bool, *, expected_seq: int | None = None, instance: str | None = None
    ) -> Session:
        """Archive (or unarchive) the session (spec 17): no event is written, and its ``instance`` and
        ``expectedSeq`` are checked as an append's are. Serialized with the session's appends in this process; a
        change another process made meanwhile is found on the next look and checked again."""
        self._require_ready()

        async def work() -> Session:
            while True:
                session = await find_live(self.backend, key)
                check_live(session, instance, expected_seq)
                changed = await self.backend.set_archived(key, session.header.instance, archived, expected_seq)
                if changed is not None:
                    return changed

        return await self._locks.run(key, work)

    # -- delete ----------------------------------------------------------------------------------------------------

    async def delete(self, key: SessionKey) -> None:
        self._require_ready()

        async def work() -> None:
            session = await find_live(self.backend, key)
            await self._delete(session)

        await self._locks.run(key, work)
        self.changes.changed(key)
        self.observer.deleted(key.tenant)

    async def _expire(self, key: SessionKey, cutoff: int) -> bool:
        """Delete the session as DELETE would if it is still expired at ``cutoff`` (spec 14); whether it was."""

        async def work() -> bool:
            try:
                session = await self.backend.find(key)
            except SessionCorrupt:
                return False
            if session is None or not is_expired(session, cutoff):
                return False  # gone already, or appended to meanwhile
            await self._delete(session)
            return True

        deleted = await self._locks.run(key, work)
        if deleted:
            self.changes.changed(key)
            self.observer.expired(key.tenant)
        return deleted

    @property
    def sessions_expired_total(self) -> int:
        """Sessions this process deleted for their tenant's retention (``forklog_sessions_expired_total``)."""
        return self.retention.expired_total

    async def _delete(self, session: Session) -> None:
        """Delete the live ``session`` (under its lock); its bytes are free at once."""
        key = session.key
        ledger = self.quotas
        counted = self.backend.capabilities.counts_locally
        if ledger is None or counted is None:
            await self.backend.delete(key)
            return
        await ledger.enter(key.tenant)
        try:
            size = 0
            if ledger.counts(key.tenant):
                size = header_bytes(session.header) + counted.log_bytes(key, session.head.count)
            await self.backend.delete(key)
            ledger.changed(key.tenant, -1, -size)
        finally:
            ledger.leave(key.tenant)
