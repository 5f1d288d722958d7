"""Noticing that the primary is gone, or is no longer a primary, so that no connection to it is used again (spec 6,
Failover).

A :class:`PrimaryWatch` asks the server it is connected to, every ``interval`` seconds, whether it is still the
primary (``pg_is_in_recovery()``). When the answer is no, or the connection failed, or the question went unanswered
twice in a row (a server that is paused or cut off answers nothing, and a statement sent to it would wait for its
whole timeout), it calls ``lost``: the backend then drops every connection of its pool, those in use included, and
takes new ones from whichever host is the primary by then (:func:`~app.backends.postgres.pool.connect` tries every
host of the URL until one takes writes). A request's error that says the same (a lost connection, a read-only
server) makes the watch look at once instead of at its next round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from app.backends.background import BackgroundLoop
from app.backends.postgres.errors import DRIVER_ERRORS
from app.backends.postgres.pool import PoolSettings, connect, redact

__all__ = ["PrimaryWatch"]

logger = logging.getLogger("forklog.storage")

UNANSWERED_LIMIT = 2  # probes in a row without an answer before the server counts as lost


class PrimaryWatch(BackgroundLoop):
    """Runs while the backend is open; calls ``lost`` once each time the primary it writes to is lost."""

    task_name = "forklog-primary-watch"

    def __init__(
        self,
        url: str,
        settings: PoolSettings,
        lost: Callable[[], Awaitable[None]],
        *,
        interval: float = 0.5,
        probe_timeout: float = 1.0,
    ) -> None:
        self._url = url
        self._settings = settings
        self._lost = lost
        self._interval = interval
        self._probe_timeout = probe_timeout
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def suspect(self) -> None:
        """A request's error suggests the server is gone or not a primary: look now."""
        self._wake.set()

    async def _run(self) -> None:
        conn: asyncpg.Connection | None = None
        try:
            healthy = True
            unanswered = 0
            while True:
                try:
                    if conn is None or conn.is_closed():
                        conn = await connect(self._url, self._settings)
                        if not healthy:
                            logger.warning("serving again from the primary at %s", redact(self._url))
                        healthy = True
                        unanswered = 0
                    if await conn.fetchval("SELECT pg_is_in_recovery()", timeout=self._probe_timeout):
                        raise asyncpg.ReadOnlySQLTransactionError("the server is a standby now")
                    unanswered = 0
                except DRIVER_ERRORS as exc:
                    if isinstance(exc, TimeoutError) and conn is not None and healthy:
                        unanswered += 1
                        if unanswered < UNANSWERED_LIMIT:
                            await self._pause()
                            continue
                    if conn is not None:
                        conn.terminate()
                        conn = None
                    if healthy:
                        healthy = False
                        logger.warning(
                            "lost the primary (%s: %s); every connection to it is dropped until a primary answers",
                            type(exc).__name__,
                            exc,
                        )
                        await self._lost()
                await self._pause()
        finally:
            if conn is not None:
                conn.terminate()

    async def _pause(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
        self._wake.clear()
