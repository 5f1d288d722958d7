"""Retries that never change anything twice (spec 8, after the IETF httpapi ``Idempotency-Key`` draft).

The first request with a key runs; if it succeeds, its answer is kept by the backend *with* its change (in the same
transaction or sync round: never one without the other), so a retry with the same key, method, path and body gets
that answer again, across restarts and processes. The same key with another request is refused; so is a retry while
the first still runs. A request that failed is not kept: its retry runs. Records are kept at least 24 hours, then
swept.

Create, append and fork run alike: :class:`IdempotencyGate` runs the operation once, giving it one
:class:`IdempotentChange` (None without a key) that makes the record, and with it the answer, when the backend
writes the change; the request gets that answer. How a change reads as an answer (:class:`ChangeAnswers`, the API's
wire format) is given to the service when it is built.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from app.backends.background import Periodic
from app.backends.base import Backend, IdempotencyRecord
from app.backends.errors import IdempotencyKeyTaken, StorageError
from app.domain.fast_init import fast_init
from app.domain.session import Session
from app.service.appends import Appended
from app.service.errors import IdempotencyKeyInProgress, IdempotencyKeyReused

__all__ = [
    "KEEP_MS",
    "NO_ANSWERS",
    "Answer",
    "ChangeAnswers",
    "IdempotencyGate",
    "IdempotentChange",
    "IdempotentRequest",
    "Operation",
]

logger = logging.getLogger("forklog.service")

KEEP_MS = 24 * 60 * 60 * 1000
SWEEP_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class IdempotentRequest:
    """A request that carried an ``Idempotency-Key``: whose key, and a digest of its method, path and body."""

    tenant: str
    key: str
    fingerprint: str


@fast_init
@dataclass(frozen=True, slots=True)
class Answer:
    """A change's HTTP answer, as kept for its retries."""

    status: int
    location: str | None
    body: bytes


class ChangeAnswers(Protocol):
    """How what a change made reads as its answer (the API's wire format). The service is given it once, when it is
    built, because a keyed change's answer is made before the change is written, to be kept with it."""

    def created(self, session: Session) -> Answer:
        """The answer to a create or a fork that made ``session``."""

    def appended(self, appended: Appended) -> Answer:
        """The answer to an append."""


class IdempotentChange:
    """A create, append or fork that carried an ``Idempotency-Key``, while it runs: it makes the record kept with
    the change and, in the same step, the change's answer, which is then the answer of the request itself (made
    once, and the very bytes a retry gets)."""

    __slots__ = ("_answers", "_now", "answer", "request")

    def __init__(self, request: IdempotentRequest, answers: ChangeAnswers, now: Callable[[], int]) -> None:
        self.request = request
        self._answers = answers
        self._now = now
        # The answer of the record made last: an append staged again (its head moved) makes its record again.
        self.answer: Answer | None = None

    @property
    def slot(self) -> tuple[str, str]:
        """The tenant and the key, as the backend recalls a record by them."""
        return self.request.tenant, self.request.key

    def created(self, session: Session) -> IdempotencyRecord:
        """The record of a create or fork, made from the session it made (the backend's ``Remember``)."""
        return self._record(self._answers.created(session), session, 0)

    def appended(self, appended: Appended) -> IdempotencyRecord:
        """The record of an append, made from the append's answer."""
        first_seq = appended.events[0]["seq"] if appended.events else appended.session.head.count
        return self._record(self._answers.appended(appended), appended.session, first_seq)

    def _record(self, answer: Answer, session: Session, first_seq: int) -> IdempotencyRecord:
        self.answer = answer
        return IdempotencyRecord(
            tenant=self.request.tenant,
            key=self.request.key,
            fingerprint=self.request.fingerprint,
            status=answer.status,
            location=answer.location,
            body=answer.body,
            created_at=self._now(),
            session=session.id,
            instance=session.header.instance,
            first_seq=first_seq,
            end_seq=session.head.count,
        )


class _NoAnswers:
    """The answers of a service built without any (one that runs its operations for a test or a tool): it answers
    no change over HTTP, so asking it is a bug."""

    def created(self, session: Session) -> Answer:
        raise RuntimeError("this service was built without ChangeAnswers: it cannot answer a change")

    def appended(self, appended: Appended) -> Answer:
        raise RuntimeError("this service was built without ChangeAnswers: it cannot answer a change")


NO_ANSWERS: ChangeAnswers = _NoAnswers()

# A create, append or fork, given the idempotent change it keeps its record with (None: a request without a key).
Operation = Callable[[IdempotentChange | None], Awaitable[Session | Appended]]


class IdempotencyGate:
    """Runs a change at most once per key (see the module's docstring)."""

    def __init__(
        self, backend: Backend, now: Callable[[], int], answers: ChangeAnswers, *, keep_ms: int = KEEP_MS
    ) -> None:
        self._backend = backend
        self._now = now
        self._answers = answers
        self._keep_ms = keep_ms
        self._running: set[tuple[str, str]] = set()
        self._sweeper = Periodic("forklog-idempotency-sweep", SWEEP_SECONDS, self._sweep_once, at_start=True)

    async def run(self, request: IdempotentRequest | None, operation: Operation) -> tuple[Answer, bool]:
        """The answer of ``operation``, run once (with a key, the answer kept with it), or the kept answer of an earlier
        request with the same key; the flag says which (True: replayed)."""
        if request is None:
            return self._answer_to(await operation(None)), False
        slot = (request.tenant, request.key)
        if slot in self._running:
            raise IdempotencyKeyInProgress()
        self._running.add(slot)
        try:
            kept = await self._backend.recall(request.tenant, request.key)
            if kept is not None:
                return _replay(kept, request), True
            running = IdempotentChange(request, self._answers, self._now)
            try:
                made = await operation(running)
            except IdempotencyKeyTaken:
                # Another process ran a request with this key meanwhile and kept its answer first.
                kept = await self._backend.recall(request.tenant, request.key)
                if kept is None:
                    raise IdempotencyKeyInProgress() from None
                return _replay(kept, request), True
            return (running.answer if running.answer is not None else self._answer_to(made)), False
        finally:
            self._running.discard(slot)

    def _answer_to(self, made: Session | Appended) -> Answer:
        if isinstance(made, Appended):
            return self._answers.appended(made)
        return self._answers.created(made)

    def start_sweeping(self) -> None:
        """Forget records older than the keeping time, now and then every hour."""
        self._sweeper.start()

    async def stop_sweeping(self) -> None:
        await self._sweeper.stop()

    async def sweep(self) -> None:
        await self._backend.forget(self._now() - self._keep_ms)

    async def _sweep_once(self) -> None:
        try:
            await self.sweep()
        except StorageError as exc:  # the next round tries again
            logger.warning("could not sweep expired idempotency keys: %s", exc.detail)


def _replay(kept: IdempotencyRecord, request: IdempotentRequest) -> Answer:
    if kept.fingerprint != request.fingerprint:
        raise IdempotencyKeyReused()
    return Answer(kept.status, kept.location, kept.body)
