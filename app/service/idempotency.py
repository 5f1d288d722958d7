"""Retries that never change anything twice (spec 8, after the IETF httpapi ``Idempotency-Key`` draft).

The first request with a key runs; if it succeeds, its answer is kept by the backend *with* its change (in the same
transaction or sync round: never one without the other), so a retry with the same key, method, path and body gets
that answer again, across restarts and processes. The same key with another request is refused; so is a retry while
the first still runs. A request that failed is not kept: its retry runs. Records are kept at least 24 hours, then
swept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from app.backends.base import Backend, IdempotencyRecord, Remember
from app.backends.errors import AlreadyRemembered, StorageError
from app.domain.session import Session
from app.service.errors import IdempotencyKeyInProgress, IdempotencyKeyReused

__all__ = ["KEEP_MS", "Answer", "Claim", "IdempotencyGate", "IdempotentRequest"]

logger = logging.getLogger("forklog.service")

KEEP_MS = 24 * 60 * 60 * 1000
SWEEP_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class IdempotentRequest:
    """A request that carried an ``Idempotency-Key``: whose key, and a digest of its method, path and body."""

    tenant: str
    key: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Answer:
    """A change's HTTP answer, as kept for its retries."""

    status: int
    location: str | None
    body: bytes


@dataclass(frozen=True, slots=True)
class Claim:
    """The first request with a key, while it runs: it writes the record kept with its change."""

    request: IdempotentRequest
    now: Callable[[], int]

    def record(self, answer: Answer, session: Session, first_seq: int) -> IdempotencyRecord:
        return IdempotencyRecord(
            tenant=self.request.tenant,
            key=self.request.key,
            fingerprint=self.request.fingerprint,
            status=answer.status,
            location=answer.location,
            body=answer.body,
            created_at=self.now(),
            session=session.id,
            instance=session.header.instance,
            first_seq=first_seq,
            end_seq=session.head.count,
        )

    def for_session(self, render: Callable[[Session], Answer]) -> Remember:
        """The record of a create or fork, made from the session it made."""
        return lambda session: self.record(render(session), session, 0)


class IdempotencyGate:
    """Runs a change at most once per key (see the module's docstring)."""

    def __init__(self, backend: Backend, now: Callable[[], int], *, keep_ms: int = KEEP_MS) -> None:
        self._backend = backend
        self._now = now
        self._keep_ms = keep_ms
        self._running: set[tuple[str, str]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def run(
        self, request: IdempotentRequest | None, work: Callable[[Claim | None], Awaitable[Answer]]
    ) -> tuple[Answer, bool]:
        """``work``'s answer (``work`` keeps it through the claim it is given), or the kept answer of an earlier
        request with the same key; the flag says which (True: replayed)."""
        if request is None:
            return await work(None), False
        slot = (request.tenant, request.key)
        if slot in self._running:
            raise IdempotencyKeyInProgress()
        self._running.add(slot)
        try:
            kept = await self._backend.recall(request.tenant, request.key)
            if kept is not None:
                return _replay(kept, request), True
            try:
                return await work(Claim(request, self._now)), False
            except AlreadyRemembered:
                # Another process ran a request with this key meanwhile and kept its answer first.
                kept = await self._backend.recall(request.tenant, request.key)
                if kept is None:
                    raise IdempotencyKeyInProgress() from None
                return _replay(kept, request), True
        finally:
            self._running.discard(slot)

    def start_sweeping(self) -> None:
        """Forget records older than the keeping time, now and then every hour."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever())

    async def stop_sweeping(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    async def sweep(self) -> None:
        await self._backend.forget(self._now() - self._keep_ms)

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except StorageError as exc:  # the next round tries again
                logger.warning("could not sweep expired idempotency keys: %s", exc.detail)
            await asyncio.sleep(SWEEP_SECONDS)


def _replay(kept: IdempotencyRecord, request: IdempotentRequest) -> Answer:
    if kept.fingerprint != request.fingerprint:
        raise IdempotencyKeyReused()
    return Answer(kept.status, kept.location, kept.body)
