"""One operation at a time per session, each run to its end even if the client that asked goes away."""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

__all__ = ["KeyedLocks"]

T = TypeVar("T")
K = TypeVar("K")

# An operation's turn: None when the key was free as it joined (it holds it at once), else a future that is given a
# result when the operation before it hands the key on.
Turn = asyncio.Future[None] | None


class KeyedLocks(Generic[K]):
    """A line per key: the operation at its head holds the key, the others wait in the order they joined. A key is
    kept only while someone holds it.

    Not an ``asyncio.Lock`` per key: nearly every operation finds its key free, and then joining and leaving are a
    dictionary's entry made and dropped, where a lock was made, acquired and released (several calls each time, on
    every append)."""

    def __init__(self) -> None:
        # Held keys, each with those waiting for it (None until the first waits).
        self._held: dict[K, deque[asyncio.Future[None]] | None] = {}

    async def run(self, key: K, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` alone among the operations on ``key``; a caller that is cancelled does not cancel it (the
        disk and the memory must never disagree about a change half made)."""
        return await asyncio.shield(self.start(key, work))

    def start(
        self, key: K, work: Callable[[], Awaitable[T]], *, context: contextvars.Context | None = None
    ) -> asyncio.Future[T]:
        """The task that runs ``work`` alone among the operations on ``key`` (queued behind those before it), in
        ``context`` (by default a copy of the caller's: a trace's current span, for one)."""
        turn = self._join(key)  # in line now, not when the task first runs
        return asyncio.get_running_loop().create_task(self._run_holding(key, turn, work), context=context)

    def idle(self, key: K) -> bool:
        """Whether no operation on ``key`` runs or waits."""
        return key not in self._held

    def run_here(self, key: K, work: Callable[[], Awaitable[T]]) -> Coroutine[Any, Any, T]:
        """Run ``work`` in the calling task, alone among the operations on ``key`` (queued behind those before it).
        Unlike :meth:`run`, cancelling the caller cancels ``work``: for work that a cancellation leaves whole. The
        caller awaits the coroutine returned, with no frame of this method's own between (see SessionService.append)."""
        return self._run_holding(key, self._join(key), work)

    def _join(self, key: K) -> Turn:
        if key not in self._held:
            self._held[key] = None
            return None
        waiting = self._held[key]
        if waiting is None:
            waiting = self._held[key] = deque()
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting.append(turn)
        return turn

    async def _run_holding(self, key: K, turn: Turn, work: Callable[[], Awaitable[T]]) -> T:
        if turn is not None:
            try:
                await turn
            except BaseException:
                # Cancelled in line. Had the turn come meanwhile, the key is this operation's to hand on; if not, its
                # cancelled turn stays in line and is passed over.
                if turn.done() and not turn.cancelled():
                    self._hand_on(key)
                raise
        try:
            return await work()
        finally:
            self._hand_on(key)

    def _hand_on(self, key: K) -> None:
        """The holder of ``key`` is done: the first still waiting holds it now, or no one does."""
        waiting = self._held[key]
        while waiting:
            turn = waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        del self._held[key]
