"""Appends to one session that arrive while its previous batch is being written wait together and become its next
batch: checked one after another (each as if the ones before it were in the log), written and synced once, each
answered on its own.

Each batch takes the session's lock like any other operation, one batch at a time, so a delete or a fork waiting
there goes between two batches: a stream of appends cannot starve it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from app.backends.base import IdempotencyRecord
from app.domain.session import SessionKey
from app.service.locks import KeyedLocks

__all__ = ["AppendQueue", "WaitingAppend"]

R = TypeVar("R")


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
    ) -> R:
        waiting: WaitingAppend[R] = WaitingAppend(
            events,
            expected_seq,
            instance,
            breaks,
            asyncio.get_running_loop().create_future(),
            record,
            claimed,
            contextvars.copy_context(),
        )
        queue = self._waiting.get(key)
        if queue is not None:
            queue.append(waiting)
        else:
            self._waiting[key] = [waiting]
            self._start_drainer(key)
        # No shield needed: a request cancelled meanwhile cancels only its answer; its batch is written all the
        # same, and succeed/fail skip an answer no one waits for.
        return await waiting.answer

    async def drained(self) -> None:
        """Wait until every batch handed over so far is written (at shutdown)."""
        while self._drainers:
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
            if self._waiting.get(key):
                # The next batch queues on the session's lock like any operation: a delete or a fork waiting there
                # goes first.
                self._start_drainer(key)
            else:
                self._waiting.pop(key, None)
