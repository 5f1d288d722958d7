"""A session's operations run one at a time, in the order they joined its line; one cancelled in line (or as its
turn came) neither runs nor keeps the others waiting, and a key no one holds is forgotten."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from app.service.locks import KeyedLocks


class Recorder:
    """Operations that note when they start and end, and end when released."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.running = 0
        self.most_at_once = 0
        self.release: dict[str, asyncio.Event] = {}

    def work(self, name: str) -> Callable[[], Awaitable[str]]:
        self.release[name] = asyncio.Event()

        async def operation() -> str:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            self.log.append(f"start {name}")
            try:
                await self.release[name].wait()
            finally:
                self.running -= 1
                self.log.append(f"end {name}")
            return name

        return operation


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def three_in_line() -> tuple[KeyedLocks[str], Recorder, tuple[asyncio.Future[str], ...]]:
    """Key "s": "a" holds it (a task of its own), "b" waits in its caller's task, "c" waits in a task of its own."""
    locks: KeyedLocks[str] = KeyedLocks()
    seen = Recorder()
    first = locks.start("s", seen.work("a"))
    waiting = asyncio.ensure_future(locks.run_here("s", seen.work("b")))
    last = locks.start("s", seen.work("c"))
    await settle()
    return locks, seen, (first, waiting, last)


def test_operations_on_one_key_run_alone_in_the_order_they_joined() -> None:
    async def run() -> None:
        locks: KeyedLocks[str] = KeyedLocks()
        seen = Recorder()
        tasks = [locks.start("s", seen.work(name)) for name in ("a", "b", "c")]
        await settle()
        assert seen.log == ["start a"]
        for name in ("a", "b", "c"):
            seen.release[name].set()
            await settle()
        assert [await task for task in tasks] == ["a", "b", "c"]
        assert seen.log == ["start a", "end a", "start b", "end b", "start c", "end c"]
        assert seen.most_at_once == 1
        assert locks.idle("s")

    asyncio.run(run())


def test_operations_on_other_keys_do_not_wait() -> None:
    async def run() -> None:
        locks: KeyedLocks[str] = KeyedLocks()
        seen = Recorder()
        first = locks.start("s", seen.work("a"))
        other = locks.start("t", seen.work("b"))
        await settle()
        assert seen.log == ["start a", "start b"] and not locks.idle("s") and not locks.idle("t")
        seen.release["b"].set()
        assert await other == "b"
        assert locks.idle("t") and not locks.idle("s")
        seen.release["a"].set()
        await first

    asyncio.run(run())


def test_one_cancelled_in_line_never_runs_and_the_next_gets_its_turn() -> None:
    async def run() -> None:
        locks, seen, (first, waiting, last) = await three_in_line()
        waiting.cancel()
        await settle()
        seen.release["a"].set()
        seen.release["c"].set()
        assert await first == "a" and await last == "c"
        assert waiting.cancelled()
        assert seen.log == ["start a", "end a", "start c", "end c"]
        assert locks.idle("s")

    asyncio.run(run())


def test_one_cancelled_as_its_turn_came_hands_the_key_on() -> None:
    async def run() -> None:
        locks, seen, (first, waiting, last) = await three_in_line()
        seen.release["a"].set()
        # Runs after "a" ends (its step was queued first) and hands the key to "b", before "b" resumes.
        asyncio.get_running_loop().call_soon(waiting.cancel)
        assert await first == "a"
        seen.release["c"].set()
        assert await asyncio.wait_for(last, 5) == "c"  # a key kept by the cancelled one would keep "c" waiting
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert "start b" not in seen.log
        assert locks.idle("s")

    asyncio.run(run())


def test_a_run_goes_on_when_its_caller_is_cancelled_and_a_failure_frees_the_key() -> None:
    async def run() -> None:
        locks: KeyedLocks[str] = KeyedLocks()
        seen = Recorder()
        caller = asyncio.ensure_future(locks.run("s", seen.work("a")))
        await settle()
        caller.cancel()
        await settle()
        assert seen.log == ["start a"] and not locks.idle("s")
        seen.release["a"].set()
        await settle()
        assert seen.log == ["start a", "end a"] and locks.idle("s")

        async def failing() -> None:
            raise ValueError("no")

        with pytest.raises(ValueError):
            await locks.run("s", failing)
        assert locks.idle("s")

    asyncio.run(run())
