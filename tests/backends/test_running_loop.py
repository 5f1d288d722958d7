"""The running loop without a system call each time: always the loop that runs here, never one that ran before or
runs in another thread, and the same refusal as asyncio's when none runs."""

from __future__ import annotations

import asyncio
import threading

import pytest

from app.backends.running_loop import RunningLoop


def test_it_is_the_running_loop_and_follows_a_later_one() -> None:
    running = RunningLoop()

    async def both() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
        return running.get(), asyncio.get_running_loop()

    first, expected = asyncio.run(both())
    assert first is expected
    second, expected = asyncio.run(both())  # a store used again from a new loop (a test's second asyncio.run)
    assert second is expected and second is not first


def test_a_loop_running_in_another_thread_is_not_taken_for_this_one() -> None:
    running = RunningLoop()
    other = asyncio.new_event_loop()
    taken = threading.Event()
    release = threading.Event()

    async def hold() -> None:
        running.get()  # remembered while it runs, in its own thread
        taken.set()
        await asyncio.to_thread(release.wait)

    thread = threading.Thread(target=other.run_until_complete, args=(hold(),))
    thread.start()
    try:
        assert taken.wait(10)

        async def here() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
            return running.get(), asyncio.get_running_loop()

        mine, expected = asyncio.run(here())
        assert mine is expected and mine is not other
    finally:
        release.set()
        thread.join(10)
        other.close()


def test_without_a_running_loop_it_refuses_as_asyncio_does() -> None:
    running = RunningLoop()
    asyncio.run(asyncio.sleep(0))
    with pytest.raises(RuntimeError):
        running.get()

    async def remember() -> None:
        running.get()

    asyncio.run(remember())
    with pytest.raises(RuntimeError):  # the loop it remembers has stopped
        running.get()
