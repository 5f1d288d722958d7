"""Search on PostgreSQL (spec 12) by its own full-text search: candidates that never miss a match whatever the words
(punctuation, digits, scripts, case, very long words), an index that a restart finds as it was (no rebuild), and
replicas that find each other's changes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.errors import Access
from app.backends.postgres import PostgresBackend
from app.backends.postgres.search import WORD_CHARACTERS, PostgresSearch, query_text
from app.backends.search.engine import IndexRow
from app.domain.clock import wall_clock_ms
from app.domain.search import Query, SearchText
from app.domain.session import SessionKey
from app.service.sessions import SessionService
from tests.events import (
    question_and_answer,
)

pytestmark = pytest.mark.anyio


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


@dataclass
class Replica:
    """A forklog server on the database, spoken to over HTTP (no network: its ASGI app)."""

    client: httpx.AsyncClient
    service: SessionService

    async def found(self, q: str) -> list[str]:
        response = await self.client.get("/sessions", params={"q": q})
        assert response.status_code == 200, response.text
        return sorted(item["id"] for item in response.json()["items"])

    async def create(self, session_id: str, events: list[Any]) -> None:
        response = await self.client.post("/sessions", json={"id": session_id, "seed": events})
        assert response.status_code == 201, response.text

    async def append(self, session_id: str, events: list[Any]) -> None:
        response = await self.client.post(f"/sessions/{session_id}/events", json={"events": events})
        assert response.status_code == 201, response.text

    async def delete(self, session_id: str) -> None:
        assert (await self.client.delete(f"/sessions/{session_id}")).status_code == 204

    async def caught_up(self) -> None:
        for _ in range(1000):
            if self.service.searcher.caught_up:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the index never caught up")


@contextlib.asynccontextmanager
async def replica(url: str) -> AsyncIterator[Replica]:
    app = create_app(Settings(database_url=url, log_level="warning"))
    async with app.router.lifespan_context(app):
        service: SessionService = app.state.service
        while not service.ready:
            await asyncio.sleep(0.01)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            yield Replica(client, service)


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


async def test_another_tenants_words_are_not_what_a_search_matches(engine: PostgresSearch, forklog_db: str) -> None:
    """Spec 9: the tsquery of b's search matches none of a's lexemes, so no plan (the GIN index's range of a
    prefix, or a check of each row) does work for a's matches and drops them after."""
    secrets = frozenset(f"acmesecret{number:06d}" for number in range(10_000))
    assert await engine.write([IndexRow(SessionKey("a", "vault"), ("i", 1), secrets, True, None)], []) == set()

    conn = await asyncpg.connect(forklog_db)
    try:
        every_tenant = "SELECT count(*) FROM forklog_search WHERE words @@ $1::tsquery"
        assert await conn.fetchval(every_tenant, query_text("b", ("acmesec",))) == 0
        assert await conn.fetchval(every_tenant, query_text("a", ("acmesec",))) == 1
    finally:
        await conn.close()
    assert await engine.candidates("a", ("acmesecret004",)) == {"vault"}
    assert await engine.candidates("b", ("acmesec",)) == set()


async def test_an_upgrade_empties_the_rows_an_older_forklog_wrote_without_tags(forklog_db: str) -> None:
    backend = PostgresBackend(forklog_db, clock=wall_clock_ms)
    await backend.open()
    await backend.close()
    conn = await asyncpg.connect(forklog_db)
    try:
        # What schema version 6 wrote: the words as they are, no tag (and none of version 8's changed_at).
        await conn.execute("ALTER TABLE forklog_sessions DROP COLUMN changed_at")
        await conn.execute("DROP TABLE forklog_stats_fill")  # and spec 17's, which come after it
        await conn.execute("ALTER TABLE forklog_sessions DROP COLUMN archived")
        await conn.execute(
            "INSERT INTO forklog_search (tenant, id, instance, count, size, words) "
            "VALUES ('default', 'old', 'i', 1, 7, array_to_tsvector(array['harbour']))"
        )
        await conn.execute("UPDATE forklog_schema SET version = 6")
        again = PostgresBackend(forklog_db, clock=wall_clock_ms)
        await again.open()
        await again.close()
        assert await conn.fetchval("SELECT count(*) FROM forklog_search") == 0  # indexed anew by the replicas
    finally:
        await conn.close()


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


async def search_rows(url: str) -> list[tuple[str, str]]:
    """Each search row's session and row version (``xmin``: changed by every write of the row)."""
    conn = await asyncpg.connect(url)
    try:
        return [(row["id"], row["xmin"]) for row in await conn.fetch("SELECT id, xmin::text FROM forklog_search")]
    finally:
        await conn.close()


async def test_a_restart_finds_what_was_indexed_without_rebuilding_it(forklog_db: str) -> None:
    async with replica(forklog_db) as first:
        await first.create("kept", question_and_answer("durable words", "ok"))
        await first.create("other", question_and_answer("something else", "ok"))
        await first.caught_up()
    before = sorted(await search_rows(forklog_db))
    assert [session for session, _ in before] == ["kept", "other"]

    async with replica(forklog_db) as second:
        await second.caught_up()
        assert await second.found("durable wor") == ["kept"]
        assert sorted(await search_rows(forklog_db)) == before  # not one row written again


async def test_a_session_no_replica_indexed_before_it_stopped_is_found_after_the_start(forklog_db: str) -> None:
    async with replica(forklog_db) as first:
        await first.create("unindexed", question_and_answer("quiet lighthouse", "ok"))
        await first.caught_up()
    conn = await asyncpg.connect(forklog_db)
    try:  # as if the replica that stored it had stopped before its round
        await conn.execute("DELETE FROM forklog_search")
    finally:
        await conn.close()

    async with replica(forklog_db) as second:
        assert await second.found("lighthouse") == ["unindexed"]
        await second.caught_up()
        assert await second.found("quiet light") == ["unindexed"]
        assert [session for session, _ in await search_rows(forklog_db)] == ["unindexed"]


async def test_a_second_replicas_changes_are_found(forklog_db: str) -> None:
    async with replica(forklog_db) as one, replica(forklog_db) as two:
        await one.create("s", question_and_answer("orange harbour", "ok"))
        await eventually(lambda: two.found("orange harb"), ["s"])
        await one.append("s", question_and_answer("violet canyon", "ok", 2))
        await eventually(lambda: two.found("violet cany"), ["s"])
        await one.caught_up()
        await two.caught_up()
        assert await two.found("orange violet") == ["s"]
        await one.delete("s")
        await eventually(lambda: two.found("orange"), [])
        await two.caught_up()
        assert await two.found("violet") == []
        # The gone session's row is dropped by the next round of a replica that heard of the delete.
        await eventually(lambda: search_rows(forklog_db), [], seconds=5)
