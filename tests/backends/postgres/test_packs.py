"""Packed rows on PostgreSQL (spec 16, bytes at rest; spec 6, exact bytes): the events of ended turns are stored as
compressed packs, read back as the same lines; a database of the forklog before the packs is served as it is and
repacked in the background, in batches that an interruption leaves consistent and a restart resumes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from app.backends.base import SeedLog, SeedPrefix
from app.backends.postgres import PostgresBackend
from app.backends.postgres.packing import pack_log
from app.backends.postgres.packs import MAX_EVENTS
from app.backends.postgres.schema import migrate
from app.domain.clock import wall_clock_ms
from app.domain.ids import new_instance
from app.domain.log import seed_log
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.domain.staging_rules import stage
from tests.backends.postgres.layout import PACKED_VERSION, STORED_EVENTS, stored_text, unpack_everything
from tests.backends.test_contract import NOW
from tests.events import assistant_message, step_end, step_start, turn_end, turn_start, user_message

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def key(session_id: str) -> SessionKey:
    return SessionKey(DEFAULT_TENANT, session_id)


def streamed_turn(number: int, chunks: int) -> list[dict[str, Any]]:
    """A turn as a model streams it: deltas of a few characters, then the assembled message."""
    deltas = [
        {
            "type": "assistant/chunk",
            "data": {"turn": number, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": f"w{i % 7}"}},
        }
        for i in range(chunks)
    ]
    return [
        turn_start(number),
        user_message(f"question {number} — with a “quote” and ünïcode"),
        step_start(number, 1),
        *deltas,
        assistant_message(number, 1, f"answer {number}"),
        step_end(number, 1),
        turn_end(number),
    ]


@pytest.fixture
async def db(forklog_db: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(forklog_db)
    yield conn
    await conn.close()


@pytest.fixture
async def opened() -> AsyncIterator[list[PostgresBackend]]:
    backends: list[PostgresBackend] = []
    yield backends
    for backend in backends:
        await backend.close()


async def open_on(url: str, kept: list[PostgresBackend]) -> PostgresBackend:
    backend = PostgresBackend(url, clock=wall_clock_ms)
    await backend.open()
    kept.append(backend)
    return backend


async def append_each(backend: PostgresBackend, session_id: str, events: list[dict[str, Any]]) -> None:
    """Append ``events`` one an append, as a client streaming them does."""
    for event in events:
        tip = await backend.tip(key(session_id), refresh=True)
        assert tip is not None
        await backend.append(key(session_id), stage(tip.log, [event], appended=True, now=NOW))


async def append_all(backend: PostgresBackend, session_id: str, events: list[dict[str, Any]]) -> None:
    tip = await backend.tip(key(session_id), refresh=True)
    assert tip is not None
    await backend.append(key(session_id), stage(tip.log, events, appended=True, now=NOW))


async def eventually(check: Callable[[], Awaitable[bool]], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        assert time.monotonic() < deadline, "not done in time"
        await asyncio.sleep(0.05)


async def small_rows(db: asyncpg.Connection) -> int:
    return int(await db.fetchval("SELECT count(*) FROM forklog_events"))


async def test_an_ended_turn_appended_an_event_at_a_time_is_packed_compressed_and_reads_back_exactly(
    forklog_db: str, opened: list[PostgresBackend], db: asyncpg.Connection
) -> None:
    backend = await open_on(forklog_db, opened)
    await backend.create(key("s"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    first = streamed_turn(1, 300)
    await append_each(backend, "s", first[:-1])
    open_turn = await backend.read(key("s"), 0, 10_000)
    assert await small_rows(db) == len(first) - 1  # the open turn: one row an event
    await append_each(backend, "s", first[-1:])
    whole = await backend.read(key("s"), 0, 10_000)
    assert whole.startswith(open_turn) and whole.count(b"\n") == len(first)
    history = await backend.history(key("s"), None)

    async def packed() -> bool:
        return await small_rows(db) == 0

    await eventually(packed)
    assert await stored_text(db) == whole
    packs = await db.fetch("SELECT seq, count, size, compressed, octet_length(body) AS stored FROM forklog_packs")
    assert [(row["seq"], row["count"], row["size"]) for row in packs] == [(0, len(first), len(whole))]
    assert packs[0]["compressed"] and packs[0]["stored"] < len(whole) / 4
    # The same lines, whole or in any range, and the same history and single events.
    assert await backend.read(key("s"), 0, 10_000) == whole
    lines = whole.splitlines(keepends=True)
    for start, stop in ((0, 1), (5, 17), (len(lines) - 3, len(lines)), (1, len(lines) - 1)):
        assert await backend.read(key("s"), start, stop) == b"".join(lines[start:stop])
    assert await backend.history(key("s"), None) == history
    tip = await backend.tip(key("s"), [1, len(lines) - 1], refresh=True)
    assert tip is not None
    assert tip.log.event(1)["data"]["content"][0]["text"].startswith("question 1 — with")


async def test_a_large_append_is_stored_as_packs_at_once_cut_at_each_turn_end_and_at_the_pack_limit(
    forklog_db: str, opened: list[PostgresBackend], db: asyncpg.Connection
) -> None:
    backend = await open_on(forklog_db, opened)
    await backend.create(key("s"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    events = [*streamed_turn(1, 20), *streamed_turn(2, MAX_EVENTS + 100)]
    await append_all(backend, "s", events)
    assert await small_rows(db) == 0
    counts = [row["count"] for row in await db.fetch("SELECT count FROM forklog_packs ORDER BY seq")]
    first_turn = len(streamed_turn(1, 20))
    assert counts == [first_turn, MAX_EVENTS, len(events) - first_turn - MAX_EVENTS]
    whole = await backend.read(key("s"), 0, 10_000)
    assert await stored_text(db) == whole and whole.count(b"\n") == len(events)
    # A fork at the first turn's end shares its pack, and reads across the cut of the second turn's packs work.
    found = await backend.find(key("s"))
    assert found is not None
    await backend.create(key("kid"), new_instance(), {}, SeedPrefix(key("s"), found.header.instance, first_turn))
    assert await db.fetchval(STORED_EVENTS) == len(events)
    assert await backend.read(key("kid"), 0, 10_000) == b"".join(whole.splitlines(keepends=True)[:first_turn])
    cut = first_turn + MAX_EVENTS
    assert await backend.read(key("s"), cut - 2, cut + 2) == b"".join(
        whole.splitlines(keepends=True)[cut - 2 : cut + 2]
    )


async def test_a_seed_is_stored_as_packs_for_its_ended_turns_and_small_rows_for_its_open_one(
    forklog_db: str, opened: list[PostgresBackend], db: asyncpg.Connection
) -> None:
    backend = await open_on(forklog_db, opened)
    events = [*streamed_turn(1, 40), *streamed_turn(2, 40)[:-1]]
    log = seed_log(events, now=NOW)
    await backend.create(key("s"), new_instance(), {}, SeedLog(log))
    assert await small_rows(db) == len(streamed_turn(2, 40)) - 1
    assert await stored_text(db) == log.lines() == await backend.read(key("s"), 0, 10_000)


async def test_a_database_of_the_forklog_before_the_packs_is_served_as_it_is_then_repacked_in_resumable_batches(
    forklog_db: str, opened: list[PostgresBackend], db: asyncpg.Connection
) -> None:
    # The older forklog's layout: every event a row of forklog_events, its schema one version before the packs.
    writer = await open_on(forklog_db, opened)
    for number in range(3):
        events = [event for turn in range(1, 6) for event in streamed_turn(turn, 60 + number)]
        await writer.create(key(f"s{number}"), new_instance(), {}, SeedLog(seed_log(events, now=NOW)))
    await append_each(writer, "s0", streamed_turn(6, 5)[:-2])  # an open turn
    found = await writer.find(key("s1"))
    assert found is not None
    at = 2 * len(streamed_turn(1, 61))
    await writer.create(key("kid"), new_instance(), {}, SeedPrefix(key("s1"), found.header.instance, at))
    await writer.close()
    opened.clear()
    await unpack_everything(db)
    assert await db.fetchval("SELECT version FROM forklog_schema") == PACKED_VERSION - 1
    assert await db.fetchval("SELECT to_regclass('forklog_packs')") is None
    stored = await stored_text(db)
    total = await small_rows(db)

    # The upgrade's migration queues every log; a first batch of the repack commits, then it is interrupted.
    assert await migrate(db) == PACKED_VERSION - 1
    queued = [row["log"] for row in await db.fetch("SELECT log FROM forklog_pack_queue ORDER BY log")]
    assert len(queued) == 4
    assert await pack_log(db, queued[0], limit=100) == 100
    assert await small_rows(db) == total - 100

    # Served as it is meanwhile (the repacked batch and the small rows alike), and the restart resumes: the queue is
    # worked through, and only the open turn's rows stay small.
    served = await open_on(forklog_db, opened)
    reads: dict[str, tuple[bytes, Any]] = {}
    for session_id in ("s0", "s1", "s2", "kid"):
        reads[session_id] = (await served.read(key(session_id), 0, 10_000), await served.history(key(session_id), None))
    assert b"".join(reads[s][0] for s in ("s0", "s1", "s2")) == stored  # the kid shares s1's rows

    async def repacked() -> bool:
        return bool(await db.fetchval("SELECT count(*) FROM forklog_pack_queue") == 0)

    await eventually(repacked)
    assert await small_rows(db) == len(streamed_turn(6, 5)) - 2
    assert await stored_text(db) == stored
    for session_id, (text, history) in reads.items():
        assert await served.read(key(session_id), 0, 10_000) == text
        assert await served.history(key(session_id), None) == history
    await append_each(served, "s0", streamed_turn(6, 5)[-2:])
    assert (await served.read(key("s0"), 0, 10_000)).startswith(reads["s0"][0])


async def test_the_space_of_packed_small_rows_is_vacuumed_soon_not_when_autovacuum_wakes(
    forklog_db: str, opened: list[PostgresBackend], db: asyncpg.Connection
) -> None:
    await db.execute("ALTER TABLE forklog_events SET (autovacuum_enabled = false)")  # only forklog's own vacuum
    backend = await open_on(forklog_db, opened)
    await backend.create(key("s"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    await append_each(backend, "s", streamed_turn(1, 150))
    await append_each(backend, "s", streamed_turn(2, 150)[:-1])
    assert await db.fetchval("SELECT pg_relation_size('forklog_events')") > 0  # the open turn's rows
    await append_each(backend, "s", streamed_turn(2, 150)[-1:])

    async def given_back() -> bool:
        # All packed and vacuumed: the empty table's pages are truncated away.
        return await small_rows(db) == 0 and await db.fetchval("SELECT pg_relation_size('forklog_events')") == 0

    await eventually(given_back)
