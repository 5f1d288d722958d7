"""One operation at a time per session, each run to its end even if the client that asked goes away."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

__all__ = ["KeyedLocks"]

T = TypeVar("T")
K = TypeVar("K")


class KeyedLocks(Generic[K]):
    """A lock per key, made on first use and dropped when no one holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[K, tuple[asyncio.Lock, int]] = {}

    async def run(self, key: K, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` alone among the operations on ``key``; a caller that is cancelled does not cancel it (the
        disk and the memory must never disagree about a change half made)."""
        return await asyncio.shield(self.start(key, work))

    def start(
        self, key: K, work: Callable[[], Awaitable[T]], *, context: contextvars.Context | None = None
    ) -> asyncio.Future[T]:
        """The task that runs ``work`` alone among the operations on ``key`` (queued behind those before it), in
        ``context`` (by default a copy of the caller's: a trace's current span, for one)."""
        lock = self._join(key)  # in line now, not when the task first runs
        return asyncio.get_running_loop().create_task(self._run_holding(key, lock, work), context=context)

    def idle(self, key: K) -> bool:
        """Whether no operation on ``key`` runs or waits."""
        return key not in self._locks

    def run_here(self, key: K, work: Callable[[], Awaitable[T]]) -> Coroutine[Any, Any, T]:
        """Run ``work`` in the calling task, alone among the operations on ``key`` (queued behind those before it).
        Unlike :meth:`run`, cancelling the caller cancels ``work``: for work that a cancellation leaves whole. The
        caller awaits the coroutine returned, with no frame of this method's own between (see SessionService.append)."""
        return self._run_holding(key, self._join(key), work)

    def _join(self, key: K) -> asyncio.Lock:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        return lock

    async def _run_holding(self, key: K, lock: asyncio.Lock, work: Callable[[], Awaitable[T]]) -> T:
        try:
            async with lock:
                return await work()
        finally:
            held, remaining = self._locks[key]
            if remaining <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (held, remaining - 1)
