"""forklog behind PgBouncer (spec 6, A connection pooler): the pooler is found, not guessed; what needs a session goes
over FORKLOG_DATABASE_DIRECT_URL; a pooler forklog cannot keep its rules through refuses the start, saying what to
set. (The contract suite itself runs through PgBouncer too: tests/backends/conftest.py's ``pgbouncer`` backend.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from app.backends.base import SeedLog
from app.backends.errors import Access, StartRefused
from app.backends.postgres import PostgresBackend, refusal_of
from app.backends.postgres.pooler import behind_pooler
from app.domain.clock import wall_clock_ms
from app.domain.ids import new_instance
from app.domain.log import seed_log
from app.domain.session import DEFAULT_TENANT, SessionKey
from tests.backends.test_contract import NOW, turn
from tests.support.pg_fixtures import through_bouncer
from tests.support.pgbouncer import PgBouncer
from tests.support.postgres import PostgresCluster, PostgresServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def opened() -> AsyncIterator[list[PostgresBackend]]:
    backends: list[PostgresBackend] = []
    yield backends
    for backend in backends:
        await backend.close()


@pytest.fixture
def statement_bouncer(pg_server: PostgresServer) -> Iterator[PgBouncer]:
    """A PgBouncer in ``statement`` pooling mode, which refuses every transaction block."""
    if not isinstance(pg_server, PostgresCluster) or pg_server.port is None:
        pytest.skip("needs the throwaway cluster")
    with PgBouncer(pg_server.port, pool_mode="statement") as bouncer:
        yield bouncer


async def open_on(url: str, kept: list[PostgresBackend], **options: Any) -> PostgresBackend:
    backend = PostgresBackend(url, clock=wall_clock_ms, wait=False, **options)
    await backend.open()
    kept.append(backend)
    return backend


async def pooled(url: str) -> bool:
    conn = await asyncpg.connect(url, statement_cache_size=0)
    try:
        return await behind_pooler(conn)
    finally:
        await conn.close()


async def test_a_pooler_is_found_and_a_direct_connection_is_not(forklog_db: str, forklog_db_pooled: str) -> None:
    assert not await pooled(forklog_db)
    assert await pooled(forklog_db_pooled)


async def test_two_replicas_through_the_pooler_start_and_see_each_others_changes(
    forklog_db_pooled: str, opened: list[PostgresBackend]
) -> None:
    # asyncpg's named statements would collide on PgBouncer's shared server connections here (issue 42:
    # 'prepared statement "__asyncpg_stmt_5__" already exists') and LISTEN would hold no session.
    first = await open_on(forklog_db_pooled, opened, poll_interval=0.2)
    second = await open_on(forklog_db_pooled, opened, poll_interval=0.2)
    heard: list[SessionKey] = []
    second.listen(heard.append)
    await first.create(SessionKey(DEFAULT_TENANT, "s"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    deadline = time.monotonic() + 1.0
    while not heard:
        assert time.monotonic() < deadline, "the polling feed did not report the other replica's create within 1 s"
        await asyncio.sleep(0.01)
    found = await second.find(SessionKey(DEFAULT_TENANT, "s"))
    assert found is not None and found.header.id == "s"


async def test_the_direct_url_carries_the_notifications_past_the_pooler(
    forklog_db: str, forklog_db_pooled: str, opened: list[PostgresBackend]
) -> None:
    # A poll too slow to matter: only a notification can report the change within the second.
    first = await open_on(forklog_db_pooled, opened, poll_interval=30.0, direct_url=forklog_db)
    second = await open_on(forklog_db_pooled, opened, poll_interval=30.0, direct_url=forklog_db)
    heard: list[SessionKey] = []
    second.listen(heard.append)
    await asyncio.sleep(0.5)  # the feed connected and listening
    await first.create(SessionKey(DEFAULT_TENANT, "s"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    deadline = time.monotonic() + 1.0
    while not heard:
        assert time.monotonic() < deadline, "no notification came over the direct URL"
        await asyncio.sleep(0.01)
    assert heard == [SessionKey(DEFAULT_TENANT, "s")]


async def test_a_direct_url_that_is_a_pooler_too_refuses_the_start(
    forklog_db_pooled: str, opened: list[PostgresBackend]
) -> None:
    with pytest.raises(StartRefused, match=r"FORKLOG_DATABASE_DIRECT_URL .* connection pooler too"):
        await open_on(forklog_db_pooled, opened, direct_url=forklog_db_pooled)
    refusal = await asyncio.to_thread(refusal_of, forklog_db_pooled, direct_url=forklog_db_pooled)
    assert "connection pooler too" in str(refusal)


async def test_statement_pooling_refuses_the_start_naming_the_pool_mode_to_set(
    statement_bouncer: PgBouncer, forklog_db: str, opened: list[PostgresBackend]
) -> None:
    url = through_bouncer(statement_bouncer, forklog_db)
    with pytest.raises(StartRefused, match="pool_mode = transaction"):
        await open_on(url, opened)
    refusal = await asyncio.to_thread(refusal_of, url)
    assert refusal is not None and "pool_mode = transaction" in str(refusal)


async def test_a_server_whose_commits_are_not_durable_refuses_a_start_through_the_pooler_only(
    pg_server: PostgresServer, forklog_db: str, forklog_db_pooled: str, opened: list[PostgresBackend]
) -> None:
    name = forklog_db.rsplit("/", 1)[1]
    conn = await asyncpg.connect(forklog_db)
    try:
        await conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    finally:
        await conn.close()
    with pytest.raises(StartRefused, match=r"synchronous_commit is 'off'.*ALTER ROLE"):
        await open_on(forklog_db_pooled, opened)
    refusal = await asyncio.to_thread(refusal_of, forklog_db_pooled)
    assert refusal is not None and "synchronous_commit" in str(refusal)
    # Directly, forklog's own SET holds for each of its connections: it starts and commits durably.
    direct = await open_on(forklog_db, opened)
    assert await asyncio.to_thread(refusal_of, forklog_db) is None
    async with direct._connection(Access.READ) as own:
        assert await own.fetchval("SHOW synchronous_commit") == "on"


async def test_the_pool_size_setting_bounds_the_connections_a_busy_process_holds(forklog_db: str) -> None:
    from app.api.settings import Settings
    from app.backends.open import OpenFor, open_store

    store = Settings(database_url=forklog_db, database_pool_size=2).store
    backend = open_store(store, OpenFor.SERVE)
    await backend.open()
    try:
        before = await _connections(forklog_db)

        async def busy() -> None:
            async with backend._connection(Access.READ) as conn:  # type: ignore[attr-defined]
                await conn.execute("SELECT pg_sleep(0.2)")

        reading = asyncio.gather(*(busy() for _ in range(8)))
        await asyncio.sleep(0.1)
        during = await _connections(forklog_db)
        await reading
        assert during - before <= 2
    finally:
        await backend.close()


async def _connections(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")) - 1
    finally:
        await conn.close()
