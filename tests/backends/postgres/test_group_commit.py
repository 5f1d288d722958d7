"""Group commit (app.backends.postgres.group_commit): appends to different sessions that arrive together commit in
one statement, each answered after the commit with its own outcome: its head checked as if it were alone (StaleHead),
and one append the database refuses failing alone, not its group."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from app.backends.base import SeedLog
from app.backends.errors import ChangeRefused, StaleHead
from app.backends.postgres import PostgresBackend
from app.backends.postgres.group_commit import GroupCommit
from app.domain.ids import new_instance
from app.domain.log import seed_log
from app.domain.staging_rules import stage
from tests.backends.postgres.test_postgres import grow, key, open_on, scalar
from tests.backends.test_contract import NOW, turn

pytestmark = pytest.mark.anyio

SESSIONS = 32


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def opened(forklog_db: str) -> AsyncIterator[list[PostgresBackend]]:
    backends: list[PostgresBackend] = []
    yield backends
    for backend in backends:
        await backend.close()


async def made(backend: PostgresBackend, count: int) -> list[str]:
    ids = [f"s{number}" for number in range(count)]
    for session_id in ids:
        await backend.create(key(session_id), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    return ids


async def append_turn(backend: PostgresBackend, session_id: str, number: int) -> None:
    tip = await backend.tip(key(session_id))
    assert tip is not None
    await backend.append(key(session_id), stage(tip.log, turn(number), appended=True, now=NOW))


async def test_concurrent_appends_to_many_sessions_share_commits_and_each_is_stored(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    backend = await open_on(forklog_db, opened)
    ids = await made(backend, SESSIONS)
    await asyncio.gather(*(append_turn(backend, session_id, 2) for session_id in ids))
    # Rows a transaction wrote carry its id (xmin): fewer transactions than appends moved the heads.
    transactions = await scalar(forklog_db, "SELECT count(DISTINCT xmin::text) FROM forklog_sessions")
    assert transactions < SESSIONS / 2
    for session_id in ids:
        assert (await backend.find(key(session_id))).head.count == 16  # type: ignore[union-attr]
        assert (await backend.read(key(session_id), 8, 16)).count(b'"type":"turn/start"') == 1


async def test_an_append_whose_head_moved_is_stale_and_the_rest_of_its_group_is_stored(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    first, second = await open_on(forklog_db, opened), await open_on(forklog_db, opened)
    ids = await made(first, 8)
    await grow(second, "s3", range(2, 3))  # another replica moves s3's head: first's cached tip of it is stale
    outcomes = await asyncio.gather(*(append_turn(first, session_id, 2) for session_id in ids), return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [type(None)] * 3 + [StaleHead] + [type(None)] * 4
    counts = [(await first.find(key(session_id))).head.count for session_id in ids]  # type: ignore[union-attr]
    assert counts == [16] * 8
    for session_id in ids:  # s3 holds second's turn 2 once, not first's too
        assert (await first.read(key(session_id), 0, 99)).count(b'"type":"turn/start"') == 2


async def test_an_append_the_database_refuses_fails_alone_not_its_group(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    backend = await open_on(forklog_db, opened)
    ids = await made(backend, 8)
    log = await scalar(forklog_db, "SELECT log FROM forklog_sessions WHERE id = 's5'")
    conn = await asyncpg.connect(forklog_db)
    try:  # a row in the way of s5's next event: its insert breaks the primary key
        await conn.execute("INSERT INTO forklog_events (log, seq, line) VALUES ($1, 8, '{}')", log)
    finally:
        await conn.close()
    appends = (append_turn(backend, session_id, 2) for session_id in ids)
    outcomes = await asyncio.gather(*appends, return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [type(None)] * 5 + [ChangeRefused] + [type(None)] * 2
    counts = [(await backend.find(key(session_id))).head.count for session_id in ids]  # type: ignore[union-attr]
    assert counts == [16] * 5 + [8] + [16] * 2


# -- the batching itself -------------------------------------------------------------------------------------------


async def test_a_key_is_in_a_batch_once_and_a_caller_gone_before_its_batch_sends_nothing() -> None:
    batches: list[list[str]] = []
    release = asyncio.Event()

    async def commit(items: list[str]) -> list[str]:
        batches.append(items)
        await release.wait()
        return [item.upper() for item in items]

    group: GroupCommit[str, str] = GroupCommit(commit, max_in_flight=1)
    first = asyncio.ensure_future(group.submit("a", "a1"))
    await asyncio.sleep(0)  # the first batch starts at once, alone
    waiting = [asyncio.ensure_future(group.submit(k, item)) for k, item in (("a", "a2"), ("b", "b1"), ("c", "c1"))]
    gone = asyncio.ensure_future(group.submit("d", "d1"))
    await asyncio.sleep(0)
    gone.cancel()
    release.set()
    assert await asyncio.gather(first, *waiting) == ["A1", "A2", "B1", "C1"]
    assert batches == [["a1"], ["a2", "b1", "c1"]]
