"""Who is waiting for a session to change, and waking them when it does (the live tail and long-polls, spec 7).

Waiters of one session share one future: a change resolves it and the next waiter makes a new one, so a thousand
streams on a session cost one future, not a queue each. A change is this process's own (the service reports its
commits) or another process's (the backend reports them, see ``Backend.listen``). A waiter takes its ticket
*before* it reads the log, so that a change landing while it reads still wakes it.
"""

from __future__ import annotations

import asyncio
import contextlib

from app.domain.session import SessionKey

__all__ = ["ChangeFeed", "Ticket"]


class Ticket:
    """A waiter's place in the queue for one session's next change."""

    __slots__ = ("_future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self._future = future

    async def wait(self, timeout: float | None) -> bool:
        """Wait for the change (True) or the timeout (False); the feed closing counts as a change."""
        if self._future.done():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._future)
            return True
        return False


class ChangeFeed:
    def __init__(self) -> None:
        self._next: dict[SessionKey, asyncio.Future[None]] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def ticket(self, key: SessionKey) -> Ticket:
        """A ticket for the next change of ``key`` (at once resolved once the feed is closed)."""
        future = self._next.get(key)
        if future is None or future.done():
            future = asyncio.get_running_loop().create_future()
            if self._closed:
                future.set_result(None)
            else:
                self._next[key] = future
        return Ticket(future)

    def changed(self, key: SessionKey) -> None:
        """``key`` changed (an append, a delete): wake everyone waiting for it."""
        future = self._next.pop(key, None)
        if future is not None and not future.done():
            future.set_result(None)

    def close(self) -> None:
        """The service is stopping: wake every waiter, now and from now on, so streams and long-polls end."""
        self._closed = True
        for future in self._next.values():
            if not future.done():
                future.set_result(None)
        self._next.clear()
