"""A loop run in the background while its owner is open (PostgreSQL's doorbell, change poll and primary watch; the
search indexer; the idempotency sweep, the tails' rechecks, the keys file's watch): one task, started once,
cancelled and awaited when its owner closes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from app.backends.read_routing import without_standby_reads

__all__ = ["BackgroundLoop", "Periodic"]


class BackgroundLoop:
    """Runs :meth:`_run` as one task named ``task_name`` from :meth:`start` until :meth:`stop`."""

    task_name = "forklog-background"
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            # Started outside any request's standby reads: a loop that a request happens to start reads the primary.
            self._task = asyncio.create_task(self._run(), name=self.task_name, context=without_standby_reads())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def cancel(self) -> None:
        """Cancel without waiting, for an owner that stops synchronously: the task ends on the loop's next turn, and
        a later :meth:`stop` still awaits it."""
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        raise NotImplementedError


class Periodic(BackgroundLoop):
    """Runs ``work`` every ``seconds`` (the first time at once when ``at_start``, else after the first wait);
    ``seconds`` may be a function, asked before each wait (a period that follows the settings)."""

    def __init__(
        self,
        task_name: str,
        seconds: float | Callable[[], float],
        work: Callable[[], Awaitable[None]],
        *,
        at_start: bool = False,
    ) -> None:
        self.task_name = task_name
        self._seconds = seconds
        self._work = work
        self._at_start = at_start

    def _wait(self) -> float:
        return self._seconds() if callable(self._seconds) else self._seconds

    async def _run(self) -> None:
        if not self._at_start:
            await asyncio.sleep(self._wait())
        while True:
            await self._work()
            await asyncio.sleep(self._wait())
