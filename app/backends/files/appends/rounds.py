"""Group commit: the appends that arrive while a round is written and synced wait together for the next one.

One round runs at a time. An append that arrives while none runs starts one at the end of the event loop's current
step (so that the appends of that step share it); one that arrives while a round runs joins the next round, which
starts as soon as the running one is answered. Each append waits on a future of its own: a request cancelled meanwhile
cancels its own wait, never the round.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.backends.files.appends.syncers import RoundAppend, Syncer, SyncTarget
from app.backends.running_loop import RunningLoop

__all__ = ["SyncRounds"]


@dataclass(slots=True)
class _Round:
    appends: list[RoundAppend] = field(default_factory=list)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    events: list[int] = field(default_factory=list)
    started: float = 0.0


class SyncRounds:
    def __init__(self, syncer: Syncer, *, synced: Callable[[int, float], None]) -> None:
        self._syncer = syncer
        self._synced = synced  # told of each round's durable events and its time
        self._running: _Round | None = None
        self._next: _Round | None = None
        self._idle: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # where the rounds are answered
        self._running_loop = RunningLoop()
        self._in_rounds: dict[int, int] = {}  # descriptors of the running and next rounds, with how often

    def durable(self, target: SyncTarget, lines: bytes, events: int) -> asyncio.Future[None]:
        """Append ``lines`` to ``target`` (none: written already): the future to await until the file is durable
        (the OSError of its write or sync if either failed). A future, not a coroutine: the append that waits on it
        passes one frame fewer each time it waits and resumes."""
        loop = self._running_loop.get()
        if loop is not self._loop:
            self._moved_to(loop)
        joining = self._next
        if joining is None:
            joining = self._next = _Round()
            if self._running is None:
                loop.call_soon(self._start_next)
        waiter: asyncio.Future[None] = loop.create_future()
        joining.appends.append((target, lines))
        joining.waiters.append(waiter)
        joining.events.append(events)
        self._in_rounds[target.fd] = self._in_rounds.get(target.fd, 0) + 1
        return waiter

    def busy_with(self, fd: int) -> bool:
        """Whether ``fd`` is in a round not answered yet (it must stay open until then)."""
        return fd in self._in_rounds

    async def idle(self) -> None:
        """Wait until no round runs or waits (at close)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._moved_to(loop)
        while self._running is not None or self._next is not None:
            self._idle = self._idle or asyncio.Event()
            await self._idle.wait()

    def _moved_to(self, loop: asyncio.AbstractEventLoop) -> None:
        """The rounds are used from another event loop (a store used by several ``asyncio.run``): those of the
        previous one, whose waiters are gone with it, are dropped."""
        self._loop = loop
        self._running = self._next = None
        self._idle = None
        self._in_rounds.clear()

    def prepare(self) -> None:
        self._syncer.prepare()

    def close(self) -> None:
        self._syncer.close()

    def _start_next(self) -> None:
        if self._running is not None or self._next is None:
            return
        round_, self._next = self._next, None
        self._running = round_
        round_.started = time.perf_counter()
        try:
            self._syncer.start(round_.appends, lambda error, by_place: self._answer(round_, error, by_place))
        except Exception as exc:  # the syncer could not even start: the round fails, the writer goes on
            self._answer(round_, exc if isinstance(exc, OSError) else OSError(f"the sync failed: {exc!r}"), {})

    def _answer(self, round_: _Round, error: OSError | None, by_place: dict[int, OSError]) -> None:
        if self._running is not round_:
            return
        self._running = None
        durable = _settle(round_, error, by_place)
        self._release(round_)
        try:
            if durable:
                self._synced(durable, time.perf_counter() - round_.started)
        finally:
            if self._next is not None:
                self._start_next()
            elif self._idle is not None:
                self._idle.set()
                self._idle = None

    def _release(self, round_: _Round) -> None:
        for target, _ in round_.appends:
            left = self._in_rounds.get(target.fd, 0) - 1
            if left > 0:
                self._in_rounds[target.fd] = left
            else:
                self._in_rounds.pop(target.fd, None)


def _settle(round_: _Round, error: OSError | None, by_place: dict[int, OSError]) -> int:
    """Answer each append of the round; how many events were made durable."""
    durable = 0
    for place, (waiter, events) in enumerate(zip(round_.waiters, round_.events, strict=True)):
        failure = error or by_place.get(place)
        if failure is None:
            durable += events
        if waiter.done():
            continue
        if failure is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(failure)
    return durable
