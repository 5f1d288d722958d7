"""The spec's operations on sessions, over one storage backend.

Each operation checks what the contract says, in the contract's order (spec 2.3: readiness, then the session's
existence and liveness, then the seed, the boundary or the events), and then asks the backend for the change.
Operations that change one session run one at a time (per session, in this process; a shared backend refuses a
change staged on a head another process moved, and the change is checked again). The work of a change runs to its
end even if the client goes away, so the store never keeps half of one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any

import orjson

from app.backends.base import (
    Backend,
    CountsLocally,
    EnforcesQuotas,
    LimitsOf,
    Readiness,
    Remember,
    Remembered,
    SeedLog,
    SeedPrefix,
    Tip,
)
from app.backends.errors import AlreadyRemembered, SessionCorrupt, StaleHead, StorageUnavailable
from app.domain.boundary import fork_lineage, seed_length
from app.domain.clock import wall_clock_ms
from app.domain.errors import (
    ErrorCode,
    EventRejected,
    InvalidValue,
    SessionAlreadyExists,
    SessionError,
    SessionForkError,
)
from app.domain.ids import check_id, new_instance, new_session_id
from app.domain.limits import NO_LIMITS, TenantLimits
from app.domain.listing import ListQuery, OrderKey, PageRequest
from app.domain.log import StagedEvents, join_staged, replace_targets, seed_log, stage
from app.domain.search import Match
from app.domain.session import Session, SessionHeader, SessionKey, check_live, check_meta, head_of, lineage_attrs
from app.service.appends import AppendQueue, WaitingAppend
from app.service.boundaries import message_turn_end, turn_end_of
from app.service.changes import ChangeFeed
from app.service.errors import NotReady
from app.service.idempotency import Answer, Claim, IdempotencyGate, IdempotentRequest
from app.service.locks import KeyedLocks
from app.service.observer import NO_SESSION_OBSERVER, SessionObserver
from app.service.quotas import QuotaLedger, Reservation, header_bytes
from app.service.retention import Retention, is_expired, updated_at, visible_page
from app.service.search import Searcher

__all__ = [
    "Appended",
    "Deleted",
    "Lifecycle",
    "Lineage",
    "SessionService",
    "Snapshot",
    "TailEvents",
    "wall_clock_ms",
]

logger = logging.getLogger("forklog.service")

# Seeds larger than this are checked off the event loop.
SEED_EVENTS_CHECKED_INLINE = 1000
# How often an append is checked again after another process moved the session's head under it.
STALE_RETRIES = 16
# A live tail reads at most this many events at a time: a reader that falls behind costs one such batch.
TAIL_BATCH = 128
# How long a live tail waits without news before it looks at its session again (the backend reports every change;
# this only bounds what a lost report could cost).
TAIL_RECHECK_SECONDS = 30.0
# At most this many children are listed by a lineage (spec 7); GET /sessions?parent= pages further.
LINEAGE_CHILDREN = 1000


def _always() -> bool:
    """A reader's right to read that never ends (the default of :meth:`SessionService.read` and ``tail``)."""
    return True


class Lifecycle(Enum):
    STARTING = "starting"  # the backend is opening (recovering, connecting): session routes answer NOT_READY
    READY = "ready"  # serving
    FAILED = "failed"  # opening failed with a bug: the service stays NOT_READY (the log says why)
    STOPPED = "stopped"  # closed at shutdown


@dataclass(frozen=True, slots=True)
class Appended:
    """An append's answer: the stored events (as values and as their JSONL lines) and the session right after."""

    events: list[dict[str, Any]]
    lines: bytes
    session: Session


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The RFC's snapshot: the source as it was, its seed's JSONL lines (a piece at a time), the child's meta."""

    source: Session
    seed: AsyncIterator[bytes]
    meta: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TailEvents:
    """Events of a live tail: the JSONL lines of events ``first_seq`` onward."""

    first_seq: int
    lines: bytes


@dataclass(frozen=True, slots=True)
class Deleted:
    """The tailed session was deleted (or replaced by a new incarnation): the tail ends."""

    id: str


@dataclass(frozen=True, slots=True)
class Lineage:
    ancestors: list[Session]
    children: list[Session]
    missing_ancestor: str | None


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
    ) -> None:
        self.backend = backend
        self.observer = observer
        # Each tenant's limits as they are now (spec 14: the keys file may change them at any time).
        self.tenant_limits = tenant_limits

        def limits_of(tenant: str) -> TenantLimits:
            return tenant_limits().get(tenant, NO_LIMITS)

        self.limits_of: LimitsOf = limits_of
        # Quotas (spec 14): a shared backend checks them in its transactions, a local one is counted here.
        self.quotas: QuotaLedger | None = None
        if isinstance(backend, EnforcesQuotas):
            backend.enforce_quotas(limits_of)
        elif isinstance(backend, CountsLocally):
            self.quotas = QuotaLedger(backend, limits_of)
        self._clock = clock
        self._new_id = new_id
        self._new_instance = instance
        self.lifecycle = Lifecycle.STARTING
        self._locks: KeyedLocks[SessionKey] = KeyedLocks()
        self._appends: AppendQueue[Appended] = AppendQueue(self._locks, self._append_batch)
        self.changes = ChangeFeed()
        self.idempotency = IdempotencyGate(backend, clock)
        self.retention = Retention(backend, tenant_limits, clock, self._expire)
        self.searcher = Searcher(backend, search_index)
        self.changes.watchers.append(self.searcher.changed)
        backend.listen(self.changes.changed)

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

    async def idempotently(
        self, request: IdempotentRequest | None, work: Callable[[Claim | None], Awaitable[Answer]]
    ) -> tuple[Answer, bool]:
        """Run a change at most once per ``Idempotency-Key`` (spec 8): ``work``'s answer, or the answer kept for an
        earlier request with the key (then True). Readiness is checked first, the key's state next."""
        self._require_ready()
        answer, replayed = await self.idempotency.run(request, work)
        if replayed and request is not None:
            self.observer.replayed(request.tenant)
        return answer, replayed

    async def readiness(self) -> Readiness:
        self._require_ready()
        try:
            return await self.backend.readiness()
        except StorageUnavailable:  # a database that went away: not ready until it is back
            raise NotReady("the store cannot be reached; retry in a moment") from None

    # -- reads -----------------------------------------------------------------------------------------------------

    async def _live(self, key: SessionKey, error: type[SessionError] = SessionError) -> Session:
        session = await self.backend.find(key)
        if session is None:
            raise error(ErrorCode.SESSION_NOT_FOUND, f'session "{key.id}" not found')
        return session

    async def get(self, key: SessionKey) -> Session:
        self._require_ready()
        return await self._live(key)

    async def page(
        self, tenant: str, request: PageRequest, q: str | None = None
    ) -> tuple[list[tuple[Session, Match | None]], OrderKey | None]:
        """The page ``request`` asks for (with ``q``, of the sessions that match it, each with its match), and the
        key to continue from (None at the end)."""
        self._require_ready()
        cutoff = self.retention.cutoff(tenant)  # expired sessions never show, even before they are deleted
        limit, query = request.limit, request.query
        found: list[tuple[Session, Match | None]]
        if q is not None:
            matched = await self.searcher.search(tenant, q, replace(request, limit=limit + 1))
            found = list(matched)
            if cutoff is not None:
                # What the search found beyond its expired sessions is still in order: its next page starts after
                # the last one looked at, so nothing is skipped (a page may come back short).
                kept = [(session, match) for session, match in found if not is_expired(session, cutoff)]
                if len(found) <= limit:
                    return kept, None
                return kept[:limit], query.key_of(found[limit - 1][0])
        else:
            sessions = await visible_page(self.backend, tenant, replace(request, limit=limit + 1), cutoff)
            found = [(session, None) for session in sessions]
        if len(found) <= limit:
            return found, None
        return found[:limit], query.key_of(found[limit - 1][0])

    async def read(
        self, key: SessionKey, start: int, limit: int, *, wait_ms: int = 0, allowed: Callable[[], bool] = _always
    ) -> tuple[bytes, int]:
        """The JSONL lines of up to ``limit`` events from ``start``, and the log's length. With ``wait_ms``, when the
        log holds no event at ``start`` or after, wait up to that long for one (a long-poll, spec 7); the wait ends
        early once ``allowed`` (asked at each wake-up) says the reader may no longer read."""
        self._require_ready()
        deadline = asyncio.get_running_loop().time() + wait_ms / 1000
        while True:
            ticket = self.changes.ticket(key)
            session = await self._live(key)
            count = session.head.count
            left = deadline - asyncio.get_running_loop().time()
            if start < count or left <= 0 or self.changes.closed or not allowed():
                break
            await ticket.wait(left)
        lines = await self.backend.read(key, start, min(count, start + limit)) if start < count else b""
        return lines, count

    async def _seed_length(self, source: Session, at_seq: int | None) -> int:
        """The boundary rule (spec 2.3) on ``source`` as it is: the seed's length, or the refusal."""
        at_turn_end = False
        if at_seq is not None and 0 <= at_seq < source.head.count and at_seq != source.head.last_turn_end_seq:
            at_turn_end = await self.backend.is_turn_end(source.key, at_seq)
        return seed_length(source, at_seq, at_turn_end=at_turn_end)

    async def history(self, key: SessionKey, at_seq: int | None) -> tuple[list[Any], int]:
        """The model history, now or at the ``turn/end`` ``at_seq``; and the log's length."""
        self._require_ready()
        session = await self._live(key)
        if at_seq is not None:
            await self._seed_length(session, at_seq)
        return await self.backend.history(key, at_seq), session.head.count

    async def tail(
        self,
        key: SessionKey,
        *,
        start: int = 0,
        last_event_id: int | None = None,
        instance: str | None = None,
        allowed: Callable[[], bool] = _always,
    ) -> AsyncIterator[TailEvents | Deleted]:
        """A live tail (spec 7): every event from ``start`` (or after ``last_event_id``, which wins), then each new
        one as it is stored, until the session is deleted (a last :class:`Deleted`), the service stops or
        ``allowed`` says the reader may no longer read: asked after each read of the log, before its events are
        handed on, and at a wake-up with nothing to send (whoever can end the right wakes every tail,
        ``changes.wake_everyone``). Refusals come before the first item, when this is called."""
        self._require_ready()
        session = await self._live(key)
        if instance is not None and instance != session.header.instance:
            raise SessionError(
                ErrorCode.SESSION_NOT_LIVE,
                f'instance "{instance}" is not the live incarnation of session "{key.id}"; re-read the session',
            )
        count = session.head.count
        if last_event_id is not None:
            if last_event_id >= count:
                detail = f"Last-Event-ID {last_event_id} is not an event of the session (it has {count}); reconnect"
                raise InvalidValue("Last-Event-ID", detail, "beyond the log")
            start = last_event_id + 1
        elif start > count:
            detail = f"from {start} is beyond the log's length {count}; pick a seq up to it"
            raise InvalidValue("from", detail, "beyond the log")
        return self._follow(key, session.header.instance, start, allowed)

    async def _follow(
        self, key: SessionKey, instance: str, position: int, allowed: Callable[[], bool]
    ) -> AsyncIterator[TailEvents | Deleted]:
        self.observer.streams(key.tenant, 1)
        try:
            async for item in self._follow_from(key, instance, position, allowed):
                yield item
        finally:
            self.observer.streams(key.tenant, -1)

    async def _follow_from(
        self, key: SessionKey, instance: str, position: int, allowed: Callable[[], bool]
    ) -> AsyncIterator[TailEvents | Deleted]:
        # One ticket per look at the session: taken before the look, it wakes the tail for any change the look
        # missed, whether the look found events to send or not.
        while True:
            ticket = self.changes.ticket(key)
            try:
                session = await self.backend.find(key)
            except SessionCorrupt:
                session = None
            if session is None or session.header.instance != instance:
                if allowed():
                    yield Deleted(key.id)
                return
            count = session.head.count
            asked = False
            while position < count:
                lines = await self.backend.read(key, position, min(count, position + TAIL_BATCH))
                if not lines:
                    break
                # Asked after the read: an event stored after the reader lost its right is never handed on.
                if not allowed():
                    return
                asked = True
                yield TailEvents(position, lines)
                position += lines.count(b"\n")
            if self.changes.closed:
                return
            # A wake-up with nothing to send asks too: whatever ends a reader's right wakes every tail to ask.
            if not asked and not allowed():
                return
            await ticket.wait()

    async def lineage(self, key: SessionKey) -> Lineage:
        """The session's ancestors while each parent is live (a cycle stops before an id already listed), the first
        parent that is not live, and its children in list order (spec 7)."""
        self._require_ready()
        session = await self._live(key)
        ancestors: list[Session] = []
        seen = {key.id}
        missing: str | None = None
        parent = session.header.parent_session
        cutoff = self.retention.cutoff(key.tenant)
        while parent is not None and parent not in seen:
            try:
                found = await self.backend.find(SessionKey(key.tenant, parent))
            except SessionCorrupt:
                found = None
            if found is None or is_expired(found, cutoff):
                missing = parent
                break
            ancestors.append(found)
            seen.add(parent)
            parent = found.header.parent_session
        children_of = PageRequest(LINEAGE_CHILDREN, query=ListQuery(parent=key.id))
        children = await visible_page(self.backend, key.tenant, children_of, cutoff)
        return Lineage(ancestors, children, missing)

    # -- create ----------------------------------------------------------------------------------------------------

    async def create(
        self,
        tenant: str,
        session_id: str | None,
        seed: Sequence[Any] | None,
        meta: dict[str, Any] | None,
        *,
        seed_breaks: dict[int, str] | None = None,
        remember: Remember | None = None,
    ) -> Session:
        """A new session from ``seed`` with ``meta`` (its keys already checked): id taken, then meta, then seed.
        ``remember`` makes the idempotency record kept with it."""
        self._require_ready()
        if session_id is not None:
            check_id(session_id)
        key = SessionKey(tenant, session_id if session_id is not None else self._new_id())
        created = await self._locks.run(key, lambda: self._create(key, seed, meta or {}, seed_breaks, remember))
        self.changes.changed(key)
        self.observer.created(tenant)
        return created

    async def _create(
        self,
        key: SessionKey,
        seed: Sequence[Any] | None,
        meta: dict[str, Any],
        breaks: dict[int, str] | None,
        remember: Remember | None,
    ) -> Session:
        if await self.backend.find(key) is not None:
            raise SessionAlreadyExists(key.id)
        lineage = check_meta(meta, len(seed) if seed is not None else 0)
        if seed is not None and len(seed) > SEED_EVENTS_CHECKED_INLINE:
            # A large seed is checked in a worker thread so that the event loop keeps serving meanwhile.
            log = await asyncio.to_thread(seed_log, seed, now=self._clock(), breaks=breaks)
        else:
            log = seed_log(seed, now=self._clock(), breaks=breaks)
        instance = self._new_instance()

        def make() -> Awaitable[Session]:
            return self.backend.create(key, instance, lineage, SeedLog(log), remember)

        if self.quotas is None:
            return await make()
        body = log.byte_size
        size = header_bytes(SessionHeader(key.id, self._clock(), instance, **lineage)) + body
        return await self.quotas.charged(key.tenant, 1, size, make, lambda made: header_bytes(made.header) + body)

    # -- append ----------------------------------------------------------------------------------------------------

    async def append(
        self,
        key: SessionKey,
        events: Sequence[Any],
        *,
        expected_seq: int | None = None,
        instance: str | None = None,
        breaks: dict[int, str] | None = None,
        remember: tuple[Claim, Callable[[Appended], Answer]] | None = None,
    ) -> Appended:
        """Append a batch (atomically: all of it is stored, or none). Appends to one session that arrive while its
        previous batch is written are checked and written together (see :mod:`app.service.appends`). ``remember``
        (a claim and how to render the answer) keeps the idempotency record with the events."""
        self._require_ready()
        record: Callable[[Appended], Remembered] | None = None
        claimed: tuple[str, str] | None = None
        if remember is not None:
            claim, render = remember
            claimed = (claim.request.tenant, claim.request.key)

            def record(appended: Appended) -> Remembered:
                first = appended.events[0]["seq"] if appended.events else appended.session.head.count
                return claim.record(render(appended), appended.session, first)

        return await self._appends.submit(
            key, events, expected_seq=expected_seq, instance=instance, breaks=breaks, record=record, claimed=claimed
        )

    async def _append_batch(self, key: SessionKey, batch: list[WaitingAppend[Appended]]) -> None:
        if self.quotas is None:
            await self._append_rounds(key, batch, [])
            return
        await self.quotas.enter(key.tenant)
        reservations: list[Reservation] = []
        try:
            await self._append_rounds(key, batch, reservations)
        finally:
            for reservation in reservations:  # those of a round that did not commit
                self.quotas.release(reservation)
            self.quotas.leave(key.tenant)

    async def _append_rounds(
        self, key: SessionKey, batch: list[WaitingAppend[Appended]], reservations: list[Reservation]
    ) -> None:
        """Check and write the batch, again while another process moves the head under it; each accepted append
        reserves its bytes (in ``reservations``) until it is written or refused."""
        wanted = replace_targets(*(waiting.events for waiting in batch))
        refresh = False
        current = 0
        for _ in range(STALE_RETRIES):
            tip = await self.backend.tip(key, wanted, refresh=refresh)
            if tip is None:
                missing = SessionError(ErrorCode.SESSION_NOT_FOUND, f'session "{key.id}" not found')
                for waiting in batch:
                    waiting.fail(missing)
                return
            current = tip.session.head.count
            for reservation in reservations:  # a round that went again gives its reservations back
                self._release(reservation)
            reservations.clear()
            accepted, refused, combined = self._check_batch(tip, batch, reservations)
            if refused and tip.may_be_stale and not refresh:
                refresh = True  # a refusal is only answered once it holds on a fresh tip
                continue
            for waiting, refusal in refused:
                waiting.fail(refusal)
            if combined is None:
                return
            answers = [
                (waiting, Appended(staged.events, staged.lines, _after(tip.session, staged)))
                for waiting, staged in accepted
            ]
            records = [waiting.record(answer) for waiting, answer in answers if waiting.record is not None]
            try:
                await self.backend.append(key, combined, records)
            except StaleHead:
                refresh = True
                batch = [waiting for waiting, _ in accepted]
                continue
            except AlreadyRemembered:
                # Another process kept one of these keys meanwhile: its request answers from the record, the others
                # go again.
                refresh = True
                batch = await self._without_kept_keys([waiting for waiting, _ in accepted])
                continue
            except SessionError as refusal:
                if refusal.code is ErrorCode.QUOTA_EXCEEDED and len(accepted) > 1:
                    # A shared store refused the batch as a whole (spec 14): each append goes alone, so that
                    # those that fit are stored.
                    for waiting, _ in accepted:
                        await self._append_rounds(key, [waiting], reservations)
                    return
                for waiting, _ in accepted:
                    waiting.fail(refusal)
                return
            except Exception as failed:
                for waiting, _ in accepted:
                    waiting.fail(failed)
                return
            for reservation in reservations:
                self._commit(reservation)
            reservations.clear()
            for waiting, answer in answers:
                waiting.succeed(answer)
            self.changes.changed(key)
            self.observer.appended(key.tenant, len(combined.events), len(combined.lines))
            return
        # SEQ_CONFLICT always says where the log stood (spec 3): here, at the last look.
        busy = SessionError(
            ErrorCode.SEQ_CONFLICT, f'session "{key.id}" kept moving under the append; retry', currentSeq=current
        )
        for waiting in batch:
            waiting.fail(busy)

    async def _without_kept_keys(self, batch: list[WaitingAppend[Appended]]) -> list[WaitingAppend[Appended]]:
        remaining = []
        for waiting in batch:
            if waiting.claimed is not None and await self.backend.recall(*waiting.claimed) is not None:
                waiting.fail(AlreadyRemembered("the Idempotency-Key was kept by another process meanwhile"))
            else:
                remaining.append(waiting)
        return remaining

    def _release(self, reservation: Reservation) -> None:
        if self.quotas is not None:
            self.quotas.release(reservation)

    def _commit(self, reservation: Reservation) -> None:
        if self.quotas is not None:
            self.quotas.commit(reservation, reservation.sessions, reservation.bytes)

    def _check_batch(
        self, tip: Tip, batch: list[WaitingAppend[Appended]], reservations: list[Reservation]
    ) -> tuple[
        list[tuple[WaitingAppend[Appended], StagedEvents]],
        list[tuple[WaitingAppend[Appended], SessionError]],
        StagedEvents | None,
    ]:
        accepted: list[tuple[WaitingAppend[Appended], StagedEvents]] = []
        refused: list[tuple[WaitingAppend[Appended], SessionError]] = []
        combined: StagedEvents | None = None
        for waiting in batch:
            try:
                count = None if combined is None else combined.state.count
                check_live(tip.session, waiting.instance, waiting.expected_seq, count=count)
                staged = stage(
                    tip.log, waiting.events, appended=True, now=self._clock(), breaks=waiting.breaks, after=combined
                )
                if self.quotas is not None:  # QUOTA_EXCEEDED refuses this append alone
                    reservations.append(self.quotas.reserve(tip.session.key.tenant, 0, len(staged.lines)))
            except EventRejected as rejected:
                refused.append((waiting, _invalid_event(rejected)))
                continue
            except SessionError as refusal:  # this append alone is refused; the others go on
                refused.append((waiting, refusal))
                continue
            accepted.append((waiting, staged))
            combined = staged if combined is None else join_staged(combined, staged)
        return accepted, refused, combined

    # -- snapshot and fork -----------------------------------------------------------------------------------------

    async def snapshot(
        self,
        key: SessionKey,
        *,
        at_seq: int | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
    ) -> Snapshot:
        self._require_ready()
        source = await self._live(key, SessionForkError)
        check_live(source, instance, expected_seq, error=SessionForkError)
        count = await self._seed_length(source, at_seq)
        try:
            seed = self.backend.chunks(key, source.header.instance, count)
        except StaleHead:
            raise SessionForkError(ErrorCode.SESSION_NOT_FOUND, f'session "{key.id}" not found') from None
        return Snapshot(source, seed, fork_lineage(source, count))

    async def fork(
        self,
        key: SessionKey,
        *,
        child_id: str | None = None,
        at_seq: int | None = None,
        at_turn: int | None = None,
        at_message_id: str | None = None,
        events: Sequence[Any] | None = None,
        breaks: dict[int, str] | None = None,
        instance: str | None = None,
        expected_seq: int | None = None,
        remember: Remember | None = None,
    ) -> Session:
        """A child from the source's log at a boundary (``at_seq``, ``at_turn`` or ``at_message_id``: at most one),
        with ``events`` appended after its seed in the same atomic step (spec 12)."""
        self._require_ready()
        if child_id is not None:
            check_id(child_id, "sessionId")
        child = SessionKey(key.tenant, child_id if child_id is not None else self._new_id())
        boundary = _Boundary(at_seq, at_turn, at_message_id)
        made = await self._locks.run(
            child, lambda: self._fork(key, child, boundary, events or (), breaks, instance, expected_seq, remember)
        )
        self.changes.changed(child)
        self.observer.forked(key.tenant)
        return made

    async def _fork(
        self,
        key: SessionKey,
        child: SessionKey,
        boundary: _Boundary,
        events: Sequence[Any],
        breaks: dict[int, str] | None,
        instance: str | None,
        expected_seq: int | None,
        remember: Remember | None,
    ) -> Session:
        if await self.backend.find(child) is not None:
            raise SessionAlreadyExists(child.id)
        source = await self._live(key, SessionForkError)
        check_live(source, instance, expected_seq, error=SessionForkError)
        if boundary.turn == 0:
            count = 0
        else:
            at_seq = boundary.seq
            if boundary.turn is not None:
                at_seq = await turn_end_of(self.backend, source, boundary.turn)
            elif boundary.message_id is not None:
                at_seq = await message_turn_end(self.backend, source, boundary.message_id)
            count = await self._seed_length(source, at_seq)
        lineage = lineage_attrs(fork_lineage(source, count))
        seed = SeedPrefix(key, source.header.instance, count, then=events, now=self._clock(), breaks=breaks)
        instance = self._new_instance()

        def make() -> Awaitable[Session]:
            return self.backend.create(child, instance, lineage, seed, remember)

        try:
            if self.quotas is None or not isinstance(self.backend, CountsLocally):
                return await make()
            body = self.backend.log_bytes(key, count)  # a fork counts its whole log, shared or not
            # Its new events' lines are not encoded yet: their JSON plus room for the seq and time they get, a
            # bound from above (what the child really holds is counted once it is made).
            body += sum(map(_line_bound, events))
            size = header_bytes(SessionHeader(child.id, self._clock(), instance, **lineage)) + body
            return await self.quotas.charged(
                child.tenant, 1, size, make, lambda made: header_bytes(made.header) + made.head.body_bytes
            )
        except StaleHead:
            raise SessionForkError(ErrorCode.SESSION_NOT_FOUND, f'session "{key.id}" not found') from None
        except EventRejected as rejected:
            raise _invalid_event(rejected) from None

    # -- delete ----------------------------------------------------------------------------------------------------

    async def delete(self, key: SessionKey) -> None:
        self._require_ready()

        async def work() -> None:
            session = await self._live(key)
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
            if session is None or updated_at(session) >= cutoff:
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
        if ledger is None or not isinstance(self.backend, CountsLocally):
            await self.backend.delete(key)
            return
        await ledger.enter(key.tenant)
        try:
            size = 0
            if ledger.counts(key.tenant):
                size = header_bytes(session.header) + self.backend.log_bytes(key, session.head.count)
            await self.backend.delete(key)
            ledger.changed(key.tenant, -1, -size)
        finally:
            ledger.leave(key.tenant)


# Bytes a new event's line may gain when it is stored: its seq and time members, and the newline.
_EVENT_STAMP_BYTES = 48


def _line_bound(event: Any) -> int:
    """At least the bytes ``event``'s stored line will take (before it is checked: it may not encode at all)."""
    try:
        return len(orjson.dumps(event)) + _EVENT_STAMP_BYTES
    except TypeError:  # a value of the lossless parser orjson does not know: its text is as long
        return len(str(event)) + _EVENT_STAMP_BYTES


@dataclass(frozen=True, slots=True)
class _Boundary:
    """Where a fork's seed ends, as the request named it (at most one of them)."""

    seq: int | None
    turn: int | None
    message_id: str | None


def _after(session: Session, staged: StagedEvents) -> Session:
    return Session(session.key, session.header, head_of(staged.state))


def _invalid_event(rejected: EventRejected) -> SessionError:
    return SessionError(
        ErrorCode.INVALID_EVENT,
        f"event at index {rejected.index} is invalid: {rejected.reason}",
        index=rejected.index,
        reason=rejected.reason,
    )
