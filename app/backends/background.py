"""A loop run in the background while its owner is open (PostgreSQL's doorbell, change poll and primary watch; the
search indexer): one task, started once, cancelled and awaited when its owner closes."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["BackgroundLoop"]


class BackgroundLoop:
    """Runs :meth:`_run` as one task named ``task_name`` from :meth:`start` until :meth:`stop`."""

    task_name = "forklog-background"
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.task_name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        raise NotImplementedError
