"""Group commit: the appends that arrive while others are committing go to the database together, in one statement.

A durable commit costs one WAL flush whatever it holds, and a process has few connections: one statement per append
bounds appends/s at (pool size / commit time). Here an append is queued; a batch starts at once when fewer than
``max_in_flight`` are committing (a lone append waits for nothing), else it waits for the next batch, which takes
every append queued by then (up to ``max_batch``). Each caller is answered only from its batch's outcome, after the
commit. A session appears at most once in a batch (a second append of it waits for the next), so each statement
moves a head at most once and its condition on the head (StaleHead) holds per append as it does alone.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["GroupCommit"]

Item = TypeVar("Item")
Outcome = TypeVar("Outcome")


@dataclass(slots=True)
class _Waiting(Generic[Item, Outcome]):
    key: Hashable
    item: Item
    answer: asyncio.Future[Outcome]


class GroupCommit(Generic[Item, Outcome]):
    """Runs ``commit`` over batches of submitted items; ``commit`` returns one outcome per item, in their order (or
    raises: then every item of the batch gets that error)."""

    def __init__(
        self,
        commit: Callable[[list[Item]], Awaitable[list[Outcome]]],
        *,
        max_batch: int = 128,
        max_in_flight: int = 2,
    ) -> None:
        self._commit = commit
        self._max_batch = max_batch
        self._max_in_flight = max_in_flight
        self._queue: deque[_Waiting[Item, Outcome]] = deque()
        self._in_flight = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, key: Hashable, item: Item) -> Outcome:
        """``item``'s outcome once its batch committed. A caller cancelled before its batch began sends nothing."""
        answer: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._queue.append(_Waiting(key, item, answer))
        self._start_batches()
        return await answer

    def _start_batches(self) -> None:
        while self._queue and self._in_flight < self._max_in_flight:
            batch = self._take()
            if not batch:
                return
            self._in_flight += 1
            task = asyncio.create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take(self) -> list[_Waiting[Item, Outcome]]:
        batch: list[_Waiting[Item, Outcome]] = []
        keys: set[Hashable] = set()
        later: list[_Waiting[Item, Outcome]] = []
        while self._queue and len(batch) < self._max_batch:
            waiting = self._queue.popleft()
            if waiting.answer.done():  # its caller went away before it was sent: nothing of it is stored
                continue
            if waiting.key in keys:
                later.append(waiting)
                continue
            keys.add(waiting.key)
            batch.append(waiting)
        self._queue.extendleft(reversed(later))
        return batch

    async def _run(self, batch: list[_Waiting[Item, Outcome]]) -> None:
        try:
            outcomes = await self._commit([waiting.item for waiting in batch])
        except Exception as exc:
            for waiting in batch:
                if not waiting.answer.done():
                    waiting.answer.set_exception(exc)
        except BaseException:  # the batch itself was cancelled (the loop is closing): its outcome is unknown
            for waiting in batch:
                waiting.answer.cancel()
            raise
        else:
            for waiting, outcome in zip(batch, outcomes, strict=True):
                if not waiting.answer.done():
                    waiting.answer.set_result(outcome)
        finally:
            self._in_flight -= 1
            self._start_batches()
