"""Who is waiting for a session to change, and waking them when it does (the live tail and long-polls, spec 7).

Waiters of one session share one ``asyncio.Event``, the round they wait for: a change sets it and the next waiter
takes a new one, so a thousand streams on a session cost one event and a future each, not a queue each. A change is
this process's own (the service reports its commits) or another process's (the backend reports them, see
``Backend.listen``). A waiter takes its ticket *before* it reads the log, so that a change landing while it reads
still wakes it. Tails wait with no timeout of their own (a timer per wait costs more than the rest of a wake):
:meth:`ChangeFeed.wake_everyone` is the one timer that bounds what a lost report could cost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from app.backends.background import Periodic
from app.domain.session import SessionKey

__all__ = ["ChangeFeed", "Ticket"]


class Ticket:
    """A waiter's place in one session's next round of changes."""

    __slots__ = ("_round",)

    def __init__(self, round_: asyncio.Event) -> None:
        self._round = round_

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait for the change (True) or the timeout (False); the feed closing counts as a change."""
        if timeout is None:
            await self._round.wait()
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._round.wait()
            return True
        return False


class ChangeFeed:
    def __init__(self) -> None:
        self._rounds: dict[SessionKey, asyncio.Event] = {}
        self._closed = False
        self._rechecks: Periodic | None = None
        # Told of every change as it is reported (the search index marks the session to index it again).
        self.watchers: list[Callable[[SessionKey], None]] = []

    @property
    def closed(self) -> bool:
        return self._closed

    def ticket(self, key: SessionKey) -> Ticket:
        """A ticket for the next change of ``key`` (at once resolved once the feed is closed)."""
        round_ = self._rounds.get(key)
        if round_ is None:
            round_ = asyncio.Event()
            if self._closed:
                round_.set()
            else:
                self._rounds[key] = round_
        return Ticket(round_)

    def changed(self, key: SessionKey) -> None:
        """``key`` changed (an append, a delete): wake everyone waiting for it, on the loop's next turn, so that the
        writer's own answer (woken by then) goes out before a thousand streams' frames, not after them. Waiters
        that take a ticket from now on wait for the next change: they look at the session after this one."""
        for watcher in self.watchers:
            watcher(key)
        round_ = self._rounds.pop(key, None)
        if round_ is not None:
            asyncio.get_running_loop().call_soon(round_.set)

    def wake_everyone(self) -> None:
        """Every waiter looks at its session again, as if each had changed."""
        rounds, self._rounds = self._rounds, {}
        for round_ in rounds.values():
            round_.set()

    def start_rechecks(self, every: float) -> None:
        """Wake everyone every ``every`` seconds, until the feed closes."""
        if self._rechecks is None and not self._closed:
            self._rechecks = Periodic("forklog-tail-rechecks", every, self._recheck)
            self._rechecks.start()

    async def _recheck(self) -> None:
        self.wake_everyone()

    def stop_rechecks(self) -> None:
        if self._rechecks is not None:
            self._rechecks.cancel()
            self._rechecks = None

    def close(self) -> None:
        """The service is stopping: wake every waiter, now and from now on, so streams and long-polls end."""
        self._closed = True
        self.stop_rechecks()
        self.wake_everyone()
