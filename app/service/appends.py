"""Appends to one session that arrive while its previous batch is being written wait together and become its next
batch: checked one after another (each as if the ones before it were in the log), written and synced once, each
answered on its own (:class:`AppendQueue` collects them, :class:`BatchWriter` checks and writes a batch).

Each batch takes the session's lock like any other operation, one batch at a time, so a delete or a fork waiting
there goes between two batches: a stream of appends cannot starve it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app.backends.base import Backend, IdempotencyRecord, Tip
from app.backends.errors import IdempotencyKeyTaken, StaleHead
from app.backends.running_loop import RunningLoop
from app.domain.errors import ErrorCode, EventRejected, SessionError, session_not_found
from app.domain.fast_init import fast_init
from app.domain.log_state import LogState
from app.domain.session import Session, SessionKey, check_live, head_of
from app.domain.staging import StagedEvents, join_staged, replace_targets
from app.domain.staging_rules import stage
from app.service.changes import ChangeFeed
from app.service.errors import invalid_event
from app.service.locks import KeyedLocks
from app.service.observer import SessionObserver
from app.service.quotas import QuotaLedger, Reservation

__all__ = ["STALE_RETRIES", "AppendQueue", "Appended", "BatchWriter", "WaitingAppend"]

R = TypeVar("R")

# How often an append is checked again after another process moved the session's head under it.
STALE_RETRIES = 16


@fast_init
@dataclass(frozen=True, slots=True)
class Appended:
    """An append's answer: the stored events (as values and as their JSONL lines) and the session right after."""

    events: list[dict[str, Any]]
    lines: bytes
    session: Session


@dataclass(slots=True)
class WaitingAppend(Generic[R]):
    """One append request waiting for its session's next batch; ``record`` makes its idempotency record from its
    answer (when it carried a key, ``claimed`` names it)."""

    events: Sequence[Any]
    expected_seq: int | None
    instance: str | None
    breaks: dict[int, str] | None
    answer: asyncio.Future[R]
    record: Callable[[R], IdempotencyRecord] | None = None
    claimed: tuple[str, str] | None = None
    # The request's context: a batch runs in its first request's (its trace's span is the parent of the sync's).
    context: contextvars.Context | None = None
    # An append whose events depend on the log they follow (an interrupt's closers: spec 17) makes them from the
    # rules' state it is checked on, in its batch (so under the session's lock, atomically with the check).
    compose: Callable[[LogState], Sequence[Any]] | None = None

    def succeed(self, result: R) -> None:
        if not self.answer.done():
            self.answer.set_result(result)

    def fail(self, error: Exception) -> None:
        if not self.answer.done():
            self.answer.set_exception(error)


class AppendQueue(Generic[R]):
    """Collects waiting appends per session and hands each session's next batch to ``write_batch``."""

    def __init__(
        self,
        locks: KeyedLocks[SessionKey],
        write_batch: Callable[[SessionKey, list[WaitingAppend[R]]], Awaitable[None]],
    ) -> None:
        self._locks = locks
        self._write_batch = write_batch
        # A session is in here while its drainer runs: appends that arrive meanwhile join its next batch.
        self._waiting: dict[SessionKey, list[WaitingAppend[R]]] = {}
        self._drainers: set[asyncio.Future[None]] = set()
        self._writing_alone = 0  # appends written in their own request's task (see _write_alone)
        self._idle: asyncio.Event | None = None  # set when the last of those ends, for drained()
        self._loop = RunningLoop()

    async def submit(
        self,
        key: SessionKey,
        events: Sequence[Any],
        *,
        expected_seq: int | None,
        instance: str | None,
        breaks: dict[int, str] | None,
        record: Callable[[R], IdempotencyRecord] | None = None,
        claimed: tuple[str, str] | None = None,
        compose: Callable[[LogState], Sequence[Any]] | None = None,
    ) -> R:
        answer: asyncio.Future[R] = self._loop.get().create_future()
        waiting = WaitingAppend(events, expected_seq, instance, breaks, answer, record, claimed, compose=compose)
        queue = self._waiting.get(key)
        if queue is None and self._locks.idle(key):
            return await self._write_alone(key, waiting)
        waiting.context = contextvars.copy_context()
        if queue is not None:
            queue.append(waiting)
        else:
            self._waiting[key] = [waiting]
            self._start_drainer(key)
        # No shield needed: a request cancelled meanwhile cancels only its answer; its batch is written all the
        # same, and succeed/fail skip an answer no one waits for.
        return await answer

    async def _write_alone(self, key: SessionKey, waiting: WaitingAppend[R]) -> R:
        """The append to a session no operation holds is a batch of its own, written in its request's task (a task
        of its own for it was a measurable share of an append). The appends that arrive meanwhile wait for the next
        batch, as they would behind a drainer. A cancellation of the request (under uvicorn, only a shutdown past its
        grace cancels one) cancels this append's write, unanswered, as a crash would: its outcome is unknown (the
        file writer cuts back what it may have written before the file's next write, or at close; a database may
        have committed it), never half made, and no other request's append is in its batch."""
        self._waiting[key] = []
        self._writing_alone += 1
        try:
            await self._locks.run_here(key, lambda: self._write_batch(key, [waiting]))
        except Exception as exc:  # a bug: answered as a drainer answers a batch it could not write
            waiting.fail(exc)
        except BaseException:  # cancelled: no one is left to read the answer
            if not waiting.answer.cancel() and not waiting.answer.cancelled():
                waiting.answer.exception()  # a refusal already given is not reported as never read
            raise
        finally:
            self._writing_alone -= 1
            self._hand_on(key)
            if not self._writing_alone and self._idle is not None:
                self._idle.set()
        return waiting.answer.result()

    async def drained(self) -> None:
        """Wait until every batch handed over so far is written (at shutdown)."""
        while self._drainers or self._writing_alone:
            if self._writing_alone:
                self._idle = self._idle or asyncio.Event()
                await self._idle.wait()
                self._idle = None
            await asyncio.gather(*list(self._drainers), return_exceptions=True)

    def _start_drainer(self, key: SessionKey) -> None:
        waiting = self._waiting.get(key)
        context = waiting[0].context if waiting else None
        drainer = self._locks.start(key, lambda: self._drain(key), context=context)
        self._drainers.add(drainer)
        drainer.add_done_callback(self._drainers.discard)

    async def _drain(self, key: SessionKey) -> None:
        batch = self._waiting.get(key, [])
        self._waiting[key] = []
        try:
            await self._write_batch(key, batch)
        except BaseException as exc:  # a bug, or cancellation: answer every append of the batch all the same
            for waiting in batch:
                waiting.fail(exc if isinstance(exc, Exception) else RuntimeError("the append was cancelled"))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._hand_on(key)

    def _hand_on(self, key: SessionKey) -> None:
        """A batch of ``key`` ended: the appends that arrived meanwhile are its next batch, if any."""
        if self._waiting.get(key):
            # The next batch queues on the session's lock like any operation: a delete or a fork waiting there goes
            # first.
            self._start_drainer(key)
        else:
            self._waiting.pop(key, None)


class BatchWriter:
    """Checks a session's batch of appends on its tip and writes those accepted in one change (under the session's
    lock: the queue hands it over). A shared store may move the head meanwhile: the batch is then checked again."""

    def __init__(
        self,
        backend: Backend,
        *,
        quotas: QuotaLedger | None,
        clock: Callable[[], int],
        changes: ChangeFeed,
        observer: SessionObserver,
    ) -> None:
        self._backend = backend
        self._quotas = quotas
        self._clock = clock
        self._changes = changes
        self._observer = observer

    async def write(self, key: SessionKey, batch: list[WaitingAppend[Appended]]) -> None:
        if self._quotas is None:
            await self._rounds(key, batch, [])
            return
        await self._quotas.enter(key.tenant)
        reservations: list[Reservation] = []
        try:
            await self._rounds(key, batch, reservations)
        finally:
            for reservation in reservations:  # those of a round that did not commit
                self._quotas.release(reservation)
            self._quotas.leave(key.tenant)

    async def _rounds(
        self, key: SessionKey, batch: list[WaitingAppend[Appended]], reservations: list[Reservation]
    ) -> None:
        """Check and write the batch, again while another process moves the head under it; each accepted append
        reserves its bytes (in ``reservations``) until it is written or refused."""
        wanted = replace_targets(*(waiting.events for waiting in batch))
        refresh = False
        current = 0
        for _ in range(STALE_RETRIES):
            tip = await self._backend.tip(key, wanted, refresh=refresh)
            if tip is None:
                missing = session_not_found(key.id)
                for waiting in batch:
                    waiting.fail(missing)
                return
            current = tip.session.head.count
            for reservation in reservations:  # a round that went again gives its reservations back
                self._release(reservation)
            reservations.clear()
            accepted, refused, combined = self._check(tip, batch, reservations)
            if refused and tip.may_be_stale and not refresh:
                refresh = True  # a refusal is only answered once it holds on a fresh tip
                continue
            for waiting, refusal in refused:
                waiting.fail(refusal)
            if combined is None:
                return
            changed_at = self._clock()  # (the backend stamps what it stores with its own reading of the clock)
            answers = [
                (waiting, Appended(staged.events, staged.lines, _after(tip.session, staged, changed_at)))
                for waiting, staged in accepted
            ]
            records = [waiting.record(answer) for waiting, answer in answers if waiting.record is not None]
            try:
                await self._backend.append(key, combined, records)
            except StaleHead:
                refresh = True
                batch = [waiting for waiting, _ in accepted]
                continue
            except IdempotencyKeyTaken:
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
                        await self._rounds(key, [waiting], reservations)
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
            self._changes.changed(key)
            self._observer.appended(key.tenant, len(combined.events), len(combined.lines))
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
            if waiting.claimed is not None and await self._backend.recall(*waiting.claimed) is not None:
                waiting.fail(IdempotencyKeyTaken("the Idempotency-Key was kept by another process meanwhile"))
            else:
                remaining.append(waiting)
        return remaining

    def _release(self, reservation: Reservation) -> None:
        if self._quotas is not None:
            self._quotas.release(reservation)

    def _commit(self, reservation: Reservation) -> None:
        if self._quotas is not None:
            self._quotas.commit(reservation, reservation.sessions, reservation.bytes)

    def _check(
        self, tip: Tip, batch: list[WaitingAppend[Appended]], reservations: list[Reservation]
    ) -> tuple[
        list[tuple[WaitingAppend[Appended], StagedEvents]],
        list[tuple[WaitingAppend[Appended], SessionError]],
        StagedEvents | None,
    ]:
        """Each append of the batch checked as if the ones accepted before it were in the log: those accepted
        (with their staged events), those refused (with the refusal), and the accepted ones joined."""
        accepted: list[tuple[WaitingAppend[Appended], StagedEvents]] = []
        refused: list[tuple[WaitingAppend[Appended], SessionError]] = []
        combined: StagedEvents | None = None
        for waiting in batch:
            try:
                count = None if combined is None else combined.state.count
                check_live(tip.session, waiting.instance, waiting.expected_seq, count=count)
                events = waiting.events
                if waiting.compose is not None:
                    events = waiting.compose(tip.log.state if combined is None else combined.state)
                staged = stage(tip.log, events, appended=True, now=self._clock(), breaks=waiting.breaks, after=combined)
                if self._quotas is not None:  # QUOTA_EXCEEDED refuses this append alone
                    reservations.append(self._quotas.reserve(tip.session.key.tenant, 0, len(staged.lines)))
            except EventRejected as rejected:
                refused.append((waiting, invalid_event(rejected)))
                continue
            except SessionError as refusal:  # this append alone is refused; the others go on
                refused.append((waiting, refusal))
                continue
            accepted.append((waiting, staged))
            combined = staged if combined is None else join_staged(combined, staged)
        return accepted, refused, combined


def _after(session: Session, staged: StagedEvents, changed_at: int) -> Session:
    return Session(session.key, session.header, head_of(staged.state), changed_at)
