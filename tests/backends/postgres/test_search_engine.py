"""Search on PostgreSQL (spec 12) by its own full-text search: candidates that never miss a match whatever the words
(punctuation, digits, scripts, case, very long words), an index that a restart finds as it was (no rebuild), and
replicas that find each other's changes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.backends.errors import Access
from app.backends.postgres import PostgresBackend
from app.backends.postgres.search import WORD_CHARACTERS, PostgresSearch
from app.backends.search import IndexRow
from app.domain.clock import wall_clock_ms
from app.domain.listing import ListQuery
from app.domain.search import Query, SearchText
from app.domain.session import SessionKey
from app.service.sessions import SessionService
from tests.events import assistant_message, step_end, step_start, turn_end, turn_start, user_message

pytestmark = pytest.mark.anyio

BY_UPDATE = ListQuery(order="updated", descending=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def engine(forklog_db: str) -> AsyncIterator[PostgresSearch]:
    backend = PostgresBackend(forklog_db, clock=wall_clock_ms)
    await backend.open()
    try:
        yield backend.search_engine()
    finally:
        await backend.close()


def conversation(question: str, answer: str, number: int = 1) -> list[Any]:
    return [
        turn_start(number),
        user_message(question),
        step_start(number),
        assistant_message(number, 1, answer),
        step_end(number),
        turn_end(number),
    ]


async def found(service: SessionService, q: str, tenant: str = "default") -> list[str]:
    page, _ = await service.page(tenant, parent=None, after=None, limit=100, query=BY_UPDATE, q=q)
    return sorted(session.id for session, _ in page)


async def caught_up(service: SessionService) -> None:
    for _ in range(500):
        if service.searcher.caught_up:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the index never caught up")


async def eventually(check: Any, wanted: Any, seconds: float = 1.5) -> None:
    for _ in range(int(seconds / 0.05)):
        if await check() == wanted:
            return
        await asyncio.sleep(0.05)
    assert await check() == wanted


# Letters of several scripts, digits of several systems, punctuation, marks, spaces and symbols.
ODD_TEXT = st.lists(
    st.sampled_from([*"aZé9٣五Ωß-_'.:/\\ \t\n@#€😀\u0301İ\u0131ǅ\u00a0Ⅻ²ﬁ", "ÅSTRÖM", "x" * 3]), max_size=30
).map("".join)


def connection_to(url: str) -> Any:
    """A connection provider for an engine of its own (one connection per statement)."""

    @contextlib.asynccontextmanager
    async def connection(access: Access) -> AsyncIterator[asyncpg.Connection]:
        conn = await asyncpg.connect(url)
        try:
            yield conn
        finally:
            await conn.close()

    return connection


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ODD_TEXT, q=ODD_TEXT, picks=st.lists(st.integers(0, 99), min_size=1, max_size=3), cut=st.integers(1, 99))
def test_the_candidates_hold_every_match_whatever_the_words(
    forklog_db: str, text: str, q: str, picks: list[int], cut: int
) -> None:
    engine = PostgresSearch(connection_to(forklog_db))
    key = SessionKey("default", "s")
    present = SearchText(cwd=None, messages=[(0, text)]).all_words()
    queries = [Query.of(q)]
    if present:
        # A query made of the text's own words, the last cut short: it matches, so it must be a candidate.
        chosen = [sorted(present)[pick % len(present)] for pick in picks]
        queries.append(Query((*chosen[:-1], chosen[-1][: 1 + cut % len(chosen[-1])])))

    async def check() -> None:
        was = (await engine.covered([key])).get(key)
        assert await engine.write([IndexRow(key, ("i", 1), frozenset(present), True, was)], []) == set()
        for query in queries:
            if query.words and query.holds(present):
                assert await engine.candidates("default", query.words) == {"s"}, (text, query)
                assert await engine.candidates("other", query.words) == set()

    asyncio.run(check())


async def test_very_long_words_and_very_many_words_are_still_found(engine: PostgresSearch) -> None:
    long_word = "ab" * WORD_CHARACTERS  # longer than a lexeme is kept
    many = frozenset(f"word{number:06d}x" * 4 for number in range(30_000))  # more than a row keeps (1 MB)
    rows = [
        IndexRow(SessionKey("default", "long"), ("i", 1), frozenset({long_word, "tail"}), True, None),
        IndexRow(SessionKey("default", "many"), ("i", 1), many, True, None),
    ]
    assert await engine.write(rows, []) == set()
    assert await engine.candidates("default", (long_word,)) == {"long", "many"}
    assert await engine.candidates("default", (long_word[:-1],)) == {"long", "many"}
    assert await engine.candidates("default", (long_word, "tai")) == {"long", "many"}
    assert await engine.candidates("default", ("tail", "ab")) == {"long", "many"}
    assert await engine.candidates("default", ("nothing",)) == {"many"}  # kept without words: always a candidate


async def test_a_row_another_replica_changed_meanwhile_is_not_written_over(engine: PostgresSearch) -> None:
    key = SessionKey("default", "s")
    assert await engine.write([IndexRow(key, ("i", 2), frozenset({"first"}), True, None)], []) == set()
    assert await engine.write([IndexRow(key, ("i", 3), frozenset({"second"}), False, ("i", 2))], []) == set()
    # A writer that read the row before the last write: refused, told to read again.
    assert await engine.write([IndexRow(key, ("i", 3), frozenset({"stale"}), False, ("i", 2))], []) == {key}
    assert await engine.write([IndexRow(key, ("i", 1), frozenset({"late"}), True, None)], []) == {key}
    assert await engine.covered([key]) == {key: ("i", 3)}
    assert await engine.candidates("default", ("first", "second")) == {"s"}
    assert await engine.candidates("default", ("stale",)) == set()


async def test_a_restart_finds_what_was_indexed_without_rebuilding_it(forklog_db: str) -> None:
    first = SessionService(PostgresBackend(forklog_db, clock=wall_clock_ms))
    await first.start()
    await first.create("default", "kept", conversation("durable words", "ok"), None)
    await first.create("default", "other", conversation("something else", "ok"), None)
    await caught_up(first)
    await first.stop()
    conn = await asyncpg.connect(forklog_db)
    try:
        before = await conn.fetch("SELECT id, xmin::text FROM forklog_search ORDER BY id")
    finally:
        await conn.close()
    assert [row["id"] for row in before] == ["kept", "other"]

    second = SessionService(PostgresBackend(forklog_db, clock=wall_clock_ms))
    await second.start()
    try:
        await caught_up(second)
        assert await found(second, "durable wor") == ["kept"]
        conn = await asyncpg.connect(forklog_db)
        try:
            after = await conn.fetch("SELECT id, xmin::text FROM forklog_search ORDER BY id")
        finally:
            await conn.close()
        assert after == before  # not one row written again
    finally:
        await second.stop()


async def test_a_session_no_replica_indexed_before_it_stopped_is_found_after_the_start(forklog_db: str) -> None:
    first = SessionService(PostgresBackend(forklog_db, clock=wall_clock_ms))
    await first.start()
    await first.create("default", "unindexed", conversation("quiet lighthouse", "ok"), None)
    await caught_up(first)
    await first.stop()
    conn = await asyncpg.connect(forklog_db)
    try:  # as if the replica that stored it had stopped before its round
        await conn.execute("DELETE FROM forklog_search")
    finally:
        await conn.close()

    service = SessionService(PostgresBackend(forklog_db, clock=wall_clock_ms))
    await service.start()
    try:
        assert await found(service, "lighthouse") == ["unindexed"]
        await caught_up(service)
        assert await found(service, "quiet light") == ["unindexed"]
    finally:
        await service.stop()


async def test_a_second_replicas_changes_are_found(forklog_db: str) -> None:
    one = SessionService(PostgresBackend(forklog_db, clock=wall_clock_ms))
    two = SessionService(PostgresBackend(forklog_db, clock=wall_clock_ms))
    await one.start()
    await two.start()
    try:
        await one.create("default", "s", conversation("orange harbour", "ok"), None)
        await eventually(lambda: found(two, "orange harb"), ["s"])
        await one.append(SessionKey("default", "s"), conversation("violet canyon", "ok", 2))
        await eventually(lambda: found(two, "violet cany"), ["s"])
        await caught_up(one)
        await caught_up(two)
        assert await found(two, "orange violet") == ["s"]
        await one.delete(SessionKey("default", "s"))
        await eventually(lambda: found(two, "orange"), [])
        await caught_up(two)
        assert await found(two, "violet") == []
    finally:
        await one.stop()
        await two.stop()
