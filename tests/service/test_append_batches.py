"""Appends to a session no other operation holds are written at once, in their own request; the ones that arrive
meanwhile wait for the next batch, and an operation waiting for the session goes between the two."""

from __future__ import annotations

import asyncio

import pytest

from app.domain.errors import ErrorCode, SessionError
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.service.sessions import SessionService
from tests.domain.builders import Clock, simple_turn
from tests.service.harness import HeldAppends

KEY = SessionKey(DEFAULT_TENANT, "s")


async def started() -> tuple[HeldAppends, SessionService]:
    """A service whose appends wait for ``release``, with session ``s`` holding one turn (8 events)."""
    backend = HeldAppends(Clock())
    service = SessionService(backend, clock=Clock())
    await service.start()
    await service.create(DEFAULT_TENANT, "s", simple_turn(1), None)
    return backend, service


def test_a_delete_waiting_behind_an_append_goes_before_the_appends_that_came_after_it() -> None:
    async def run() -> None:
        backend, service = await started()
        first = asyncio.ensure_future(service.append(KEY, simple_turn(2)))
        await asyncio.sleep(0.01)
        deleting = asyncio.ensure_future(service.delete(KEY))
        await asyncio.sleep(0.01)
        later = asyncio.ensure_future(service.append(KEY, simple_turn(2)))
        await asyncio.sleep(0.01)
        assert not (first.done() or deleting.done() or later.done())
        backend.release.set()
        assert (await first).session.head.count == 16
        await deleting
        with pytest.raises(SessionError) as refused:
            await later
        assert refused.value.code is ErrorCode.SESSION_NOT_FOUND
        await service.stop()

    asyncio.run(run())


def test_appends_that_arrive_while_one_is_written_are_stored_after_it_in_order() -> None:
    async def run() -> None:
        backend, service = await started()
        first = asyncio.ensure_future(service.append(KEY, simple_turn(2)))
        await asyncio.sleep(0.01)
        later = [asyncio.ensure_future(service.append(KEY, simple_turn(turn))) for turn in (3, 4, 5)]
        await asyncio.sleep(0.01)
        backend.release.set()
        counts = [(await append).session.head.count for append in (first, *later)]
        assert counts == [16, 24, 32, 40]
        await service.stop()

    asyncio.run(run())


def test_stop_waits_for_an_append_being_written() -> None:
    async def run() -> None:
        backend, service = await started()
        writing = asyncio.ensure_future(service.append(KEY, simple_turn(2)))
        await asyncio.sleep(0.01)
        stopping = asyncio.ensure_future(service.stop())
        await asyncio.sleep(0.05)
        assert not stopping.done(), "the store was closed under an append not yet answered"
        backend.release.set()
        assert (await writing).session.head.count == 16
        await stopping
        stored = await backend.find(KEY)
        assert stored is not None and stored.head.count == 16

    asyncio.run(run())


def test_a_cancelled_append_stores_nothing_and_the_next_one_is_stored_after_the_last_answered() -> None:
    async def run() -> None:
        backend, service = await started()
        cancelled = asyncio.ensure_future(service.append(KEY, simple_turn(2)))
        await asyncio.sleep(0.01)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        backend.release.set()
        assert (await service.reads.get(KEY)).head.count == 8
        assert (await service.append(KEY, simple_turn(2))).session.head.count == 16
        await service.stop()

    asyncio.run(run())
