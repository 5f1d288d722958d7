"""Spec 14's limits on every backend (``[file]``, ``[memory]``, ``[postgres]``), through the service as the HTTP
API calls it: quotas exact under concurrency, a delete freeing at once, and retention deleting an idle session by
itself, its child keeping its log."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import pytest

from app.backends.base import Backend
from app.backends.files import FileBackend
from app.backends.memory import MemoryBackend
from app.backends.postgres import PostgresBackend
from app.domain.clock import wall_clock_ms
from app.domain.errors import ErrorCode, SessionError
from app.domain.limits import TenantLimits
from app.domain.listing import PageRequest
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.service.sessions import SessionService
from tests.backends.conftest import DATABASES, BackendFactory
from tests.backends.test_contract import turn

pytestmark = pytest.mark.anyio


def unopened(factory: BackendFactory) -> Backend:
    if factory.files:
        return FileBackend(factory.place, clock=wall_clock_ms, sync=False, compression=factory.compression)
    if factory.kind in DATABASES:
        assert factory.database_url is not None
        return PostgresBackend(factory.database_url, clock=wall_clock_ms)
    return MemoryBackend(clock=wall_clock_ms)


@asynccontextmanager
async def service_of(factory: BackendFactory, limits: Mapping[str, TenantLimits]) -> AsyncIterator[SessionService]:
    service = SessionService(unopened(factory), tenant_limits=lambda: limits)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


def key(session_id: str) -> SessionKey:
    return SessionKey(DEFAULT_TENANT, session_id)


async def test_concurrent_creates_and_forks_take_exactly_the_free_slots(make_backend: BackendFactory) -> None:
    async with service_of(make_backend, {DEFAULT_TENANT: TenantLimits(max_sessions=5)}) as service:
        await service.create(DEFAULT_TENANT, "source", turn(1), None)
        creates = [service.create(DEFAULT_TENANT, f"c{n}", None, None) for n in range(10)]
        forks = [service.forks.fork(key("source"), child_id=f"f{n}") for n in range(10)]
        outcomes = await asyncio.gather(*creates, *forks, return_exceptions=True)

        refused = [outcome for outcome in outcomes if isinstance(outcome, SessionError)]
        assert len(outcomes) - len(refused) == 4
        assert {error.code for error in refused} == {ErrorCode.QUOTA_EXCEEDED}
        assert {(error.facts["quota"], error.facts["limit"], error.facts["used"]) for error in refused} == {
            ("sessions", 5, 5)
        }
        sessions, _ = await service.reads.page(DEFAULT_TENANT, PageRequest(100))
        assert len(sessions) == 5

        await service.delete(key("source"))
        await service.create(DEFAULT_TENANT, "again", None, None)  # the delete freed its slot at once


async def test_an_idle_session_expires_and_its_child_keeps_its_log(make_backend: BackendFactory) -> None:
    async with service_of(make_backend, {DEFAULT_TENANT: TenantLimits(retention_ms=1500)}) as service:
        await service.create(DEFAULT_TENANT, "parent", turn(1), None)
        await service.forks.fork(key("parent"), child_id="child")
        started = time.monotonic()
        while True:
            await service.append(key("child"), [{"type": "forklog-test/note", "data": {"text": "alive"}}])
            sessions, _ = await service.reads.page(DEFAULT_TENANT, PageRequest(100))
            listed = [session.id for session, _ in sessions]
            if listed == ["child"] and await service.backend.find(key("parent")) is None:
                break
            assert time.monotonic() - started < 1.5 + 10, "the parent was not deleted within 10 s of expiring"
            await asyncio.sleep(0.2)
        assert service.sessions_expired_total == 1
        lines, count = await service.reads.read(key("child"), 0, 1000)
        assert count > len(turn(1)) and lines.count(b"\n") == count


async def test_an_idle_session_timed_in_2100_expires_and_its_child_appended_to_stays(
    make_backend: BackendFactory,
) -> None:
    year_2100_ms = 4_102_444_800_000  # a seed's events may carry any time; the appends after them follow it
    seed = [{**event, "seq": seq, "time": year_2100_ms + seq} for seq, event in enumerate(turn(1))]
    async with service_of(make_backend, {DEFAULT_TENANT: TenantLimits(retention_ms=1500)}) as service:
        await service.create(DEFAULT_TENANT, "parent", seed, None)
        await service.forks.fork(key("parent"), child_id="child")
        started = time.monotonic()
        while await service.backend.find(key("parent")) is not None:
            await service.append(key("child"), [{"type": "forklog-test/note", "data": {"text": "alive"}}])
            assert time.monotonic() - started < 1.5 + 10, "the parent was not deleted within 10 s of expiring"
            await asyncio.sleep(0.2)
        assert time.monotonic() - started >= 1.5 - 0.1  # by the server's clock: not before it expired
        sessions, _ = await service.reads.page(DEFAULT_TENANT, PageRequest(100))
        assert [session.id for session, _ in sessions] == ["child"]
        assert service.sessions_expired_total == 1
