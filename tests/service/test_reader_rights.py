"""A reader whose right to read ends (its key removed, spec 9): its live tail hands on nothing stored after that and
ends, idle or not, once woken; its long-poll stops waiting."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from app.backends.memory import MemoryBackend
from app.domain.clock import wall_clock_ms
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.service.sessions import Deleted, SessionService, TailEvents
from tests.api.builders import note

KEY = SessionKey(DEFAULT_TENANT, "s")


class Right:
    """A reader's right, as a keys file would grant it; counts how often it is asked."""

    def __init__(self) -> None:
        self.holds = True
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.holds


def run(scenario: Callable[[SessionService], Awaitable[None]]) -> None:
    async def main() -> None:
        service = SessionService(MemoryBackend(clock=wall_clock_ms))
        await service.start()
        try:
            await service.create(DEFAULT_TENANT, KEY.id, [note("first")], None)
            await scenario(service)
        finally:
            await service.stop()

    asyncio.run(main())


async def next_item(tail: AsyncIterator[TailEvents | Deleted]) -> TailEvents | Deleted | None:
    """The tail's next item, None when it ended; fails if neither comes within 2 s."""
    try:
        return await asyncio.wait_for(anext(tail), 2)
    except StopAsyncIteration:
        return None


def test_a_tail_hands_on_nothing_stored_after_the_right_ends() -> None:
    async def scenario(service: SessionService) -> None:
        right = Right()
        tail = await service.reads.tail(KEY, allowed=right)
        first = await next_item(tail)
        assert isinstance(first, TailEvents) and first.first_seq == 0
        pending = asyncio.ensure_future(next_item(tail))
        await asyncio.sleep(0.05)
        right.holds = False
        await service.append(KEY, [note("late")])
        assert await pending is None, "the tail ended without the event stored after the right ended"

    run(scenario)


def test_an_idle_tail_ends_when_woken_after_the_right_ends() -> None:
    async def scenario(service: SessionService) -> None:
        right = Right()
        tail = await service.reads.tail(KEY, allowed=right)
        assert isinstance(await next_item(tail), TailEvents)
        pending = asyncio.ensure_future(next_item(tail))
        await asyncio.sleep(0.05)
        assert not pending.done()
        right.holds = False
        service.changes.wake_everyone()
        assert await pending is None

    run(scenario)


def test_a_tail_asks_once_per_batch_it_sends() -> None:
    async def scenario(service: SessionService) -> None:
        right = Right()
        tail = await service.reads.tail(KEY, allowed=right)
        assert isinstance(await next_item(tail), TailEvents)
        for text in ("a", "b", "c"):
            await service.append(KEY, [note(text)])
            assert isinstance(await next_item(tail), TailEvents)
        assert right.asked == 4

    run(scenario)


def test_a_long_poll_stops_waiting_when_woken_after_the_right_ends() -> None:
    async def scenario(service: SessionService) -> None:
        right = Right()
        started = time.monotonic()
        waiting = asyncio.ensure_future(service.reads.read(KEY, 1, 10, wait_ms=30000, allowed=right))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        right.holds = False
        service.changes.wake_everyone()
        lines, count = await asyncio.wait_for(waiting, 2)
        assert (lines, count) == (b"", 1)
        assert time.monotonic() - started < 2

    run(scenario)
