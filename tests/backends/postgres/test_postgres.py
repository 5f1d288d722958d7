"""The PostgreSQL backend's own promises, beyond the contract suite: migrations once under concurrent starts, forks
that insert no event rows, a sweep that reclaims only what no live session reads, replicas (two backends on one
database) that never trust a stale cache, change notifications, and a database that goes away and comes back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from app.backends.base import SeedLog, SeedPrefix
from app.backends.errors import StaleHead, StartRefused, StorageUnavailable
from app.backends.postgres import PoolSettings, PostgresBackend
from app.backends.postgres.schema import SCHEMA_VERSION
from app.domain.clock import wall_clock_ms
from app.domain.ids import new_instance
from app.domain.log import seed_log
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.domain.staging_rules import stage
from tests.backends.postgres.layout import STORED_EVENTS, stored_text
from tests.backends.test_contract import NOW, turn
from tests.support.postgres import PostgresCluster, PostgresServer, fresh_database_name

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def key(session_id: str) -> SessionKey:
    return SessionKey(DEFAULT_TENANT, session_id)


@pytest.fixture
async def opened(forklog_db: str) -> AsyncIterator[list[PostgresBackend]]:
    """Backends opened on the test's database (``await make()``), closed at the end."""
    backends: list[PostgresBackend] = []
    yield backends
    for backend in backends:
        await backend.close()


async def open_on(url: str, kept: list[PostgresBackend], **options: Any) -> PostgresBackend:
    backend = PostgresBackend(url, clock=wall_clock_ms, **options)
    await backend.open()
    kept.append(backend)
    return backend


async def scalar(url: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def grow(backend: PostgresBackend, session_id: str, turns: range) -> None:
    for number in turns:
        tip = await backend.tip(key(session_id), refresh=True)
        assert tip is not None
        await backend.append(key(session_id), stage(tip.log, turn(number), appended=True, now=NOW))


async def fork(backend: PostgresBackend, source: str, child: str, count: int) -> None:
    found = await backend.find(key(source))
    assert found is not None
    seed = SeedPrefix(key(source), found.header.instance, count)
    await backend.create(key(child), new_instance(), {"parent_session": source, "seed_length": count}, seed)


# -- schema ------------------------------------------------------------------------------------------------------------


async def test_replicas_starting_at_once_on_an_empty_database_migrate_it_once(
    pg_server: PostgresServer, opened: list[PostgresBackend]
) -> None:
    name = pg_server.create_database(fresh_database_name("migrate_at_once"))
    try:
        url = pg_server.url(name)
        await asyncio.gather(*(open_on(url, opened) for _ in range(6)))
        assert await scalar(url, "SELECT version FROM forklog_schema") == SCHEMA_VERSION
        await opened[0].create(key("s"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
        assert (await opened[5].readiness()).sessions == 1
        for backend in opened:
            await backend.close()
        opened.clear()
    finally:
        pg_server.drop_database(name)


async def test_a_newer_schema_refuses_to_open_naming_both_versions(forklog_db: str) -> None:
    await scalar(forklog_db, "UPDATE forklog_schema SET version = $1 RETURNING version", SCHEMA_VERSION + 1)
    backend = PostgresBackend(forklog_db, clock=wall_clock_ms)
    with pytest.raises(StartRefused, match=f"version {SCHEMA_VERSION + 1}.*version {SCHEMA_VERSION}"):
        await backend.open()
    await backend.close()


async def test_a_schema_upgrade_the_role_may_not_run_refuses_at_once_instead_of_waiting_for_ever(
    pg_server: PostgresServer,
) -> None:
    # PostgreSQL 15 lets no role but the owner create tables in a new database's public schema.
    name = pg_server.create_database(fresh_database_name("no_create"))
    role = f"no_create_{name[-8:]}"
    try:
        await scalar(pg_server.url(name), f"CREATE ROLE {role} LOGIN PASSWORD '{role}'")
        parts = urlsplit(pg_server.url(name))
        url = urlunsplit(parts._replace(netloc=f"{role}:{role}@{parts.hostname}:{parts.port}"))
        backend = PostgresBackend(url, clock=wall_clock_ms)
        with pytest.raises(StartRefused, match="InsufficientPrivilegeError"):
            await asyncio.wait_for(backend.open(), timeout=20)
        await backend.close()
    finally:
        pg_server.drop_database(name)
        await scalar(pg_server.url("postgres"), f"DROP ROLE IF EXISTS {role}")


async def test_events_are_stored_as_their_exact_text(forklog_db: str, opened: list[PostgresBackend]) -> None:
    backend = await open_on(forklog_db, opened)
    log = seed_log(turn(1), now=NOW)
    await backend.create(key("s"), new_instance(), {}, SeedLog(log))
    conn = await asyncpg.connect(forklog_db)
    try:
        assert await stored_text(conn) == log.lines()
    finally:
        await conn.close()
    assert await scalar(forklog_db, "SELECT data_type FROM information_schema.columns WHERE column_name = 'line'") == (
        "text"
    )


# -- forks share their prefix ----------------------------------------------------------------------------------------


async def test_a_fork_inserts_no_event_rows_and_reads_through_its_chain(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    backend = await open_on(forklog_db, opened)
    events = [event for number in range(1, 101) for event in turn(number)]
    await backend.create(key("src"), new_instance(), {}, SeedLog(seed_log(events, now=NOW)))
    rows = await scalar(forklog_db, STORED_EVENTS)
    await fork(backend, "src", "kid", 400)
    await fork(backend, "kid", "grandkid", 200)
    await fork(backend, "src", "late", 800)
    assert await scalar(forklog_db, STORED_EVENTS) == rows == 800
    whole = await backend.read(key("src"), 0, 800)
    assert await backend.read(key("grandkid"), 0, 1000) == b"".join(whole.splitlines(keepends=True)[:200])
    assert await backend.history(key("grandkid"), None) == await backend.history(key("src"), 199)
    await grow(backend, "kid", range(51, 53))
    assert (await backend.read(key("kid"), 399, 402)).count(b"\n") == 3
    assert await backend.is_turn_end(key("grandkid"), 199) and not await backend.is_turn_end(key("grandkid"), 198)


async def test_the_sweep_reclaims_only_rows_no_live_session_reads(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    backend = await open_on(forklog_db, opened)
    await backend.create(key("src"), new_instance(), {}, SeedLog(seed_log([*turn(1), *turn(2), *turn(3)], now=NOW)))
    await fork(backend, "src", "kid", 16)
    await fork(backend, "kid", "grandkid", 8)
    kid, grandkid = await backend.read(key("kid"), 0, 99), await backend.read(key("grandkid"), 0, 99)
    await backend.delete(key("src"))
    assert await backend.sweep(grace_ms=60_000) == 0  # a snapshot may still be streaming what was deleted
    assert await backend.sweep(grace_ms=0) == 8  # turn 3: no child reads it
    await backend.delete(key("kid"))
    assert await backend.sweep(grace_ms=0) == 8  # turn 2 now
    assert await backend.read(key("grandkid"), 0, 99) == grandkid
    assert kid.startswith(grandkid)
    await backend.delete(key("grandkid"))
    assert await backend.sweep(grace_ms=0) == 8
    for table in ("events", "surface", "turn_ends", "logs"):
        assert await scalar(forklog_db, f"SELECT count(*) FROM forklog_{table}") == 0


# -- replicas ----------------------------------------------------------------------------------------------------------


async def test_a_replica_never_appends_on_a_stale_cache(forklog_db: str, opened: list[PostgresBackend]) -> None:
    first, second = await open_on(forklog_db, opened), await open_on(forklog_db, opened)
    await first.create(key("s"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    await grow(second, "s", range(2, 3))  # second caches the tip at 16
    await grow(first, "s", range(3, 5))  # first moves it to 32
    stale = await second.tip(key("s"))
    assert stale is not None and stale.may_be_stale and stale.session.head.count == 16
    with pytest.raises(StaleHead):
        await second.append(key("s"), stage(stale.log, turn(3), appended=True, now=NOW))
    fresh = await second.tip(key("s"), [12], refresh=True)
    assert fresh is not None and not fresh.may_be_stale and fresh.session.head.count == 32
    assert fresh.log.state.nodes == (await first.tip(key("s"), refresh=True)).log.state.nodes  # type: ignore[union-attr]
    assert fresh.log.event(12)["type"] == "tool/result"
    await second.append(key("s"), stage(fresh.log, turn(5), appended=True, now=NOW))
    assert (await first.find(key("s"))).head.count == 40  # type: ignore[union-attr]


async def test_created_at_keeps_increasing_across_replicas(forklog_db: str, opened: list[PostgresBackend]) -> None:
    replicas = [await open_on(forklog_db, opened) for _ in range(2)]
    made = await asyncio.gather(
        *(
            replicas[number % 2].create(key(f"s{number}"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
            for number in range(20)
        )
    )
    stamps = sorted(session.header.created_at for session in made)
    assert len(set(stamps)) == 20


async def open_stopped(url: str, kept: list[PostgresBackend], now: int = NOW) -> PostgresBackend:
    """A backend whose clock stands still at ``now``: every createdAt it gives is 1 + its tenant's largest."""
    backend = PostgresBackend(url, clock=lambda: now)
    await backend.open()
    kept.append(backend)
    return backend


async def test_each_tenants_created_at_is_serialized_across_replicas_and_its_own(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    replicas = [await open_stopped(forklog_db, opened) for _ in range(2)]

    async def make(number: int, tenant: str) -> int:
        made = await replicas[number % 2].create(
            SessionKey(tenant, f"s{number}"), new_instance(), {}, SeedLog(seed_log([], now=NOW))
        )
        return made.header.created_at

    stamps = await asyncio.gather(*(make(number, tenant) for number in range(12) for tenant in ("a", "b")))
    # Each tenant got NOW, NOW + 1, ... with no gap: distinct across both replicas, and blind to the other tenant.
    assert sorted(stamps[0::2]) == sorted(stamps[1::2]) == [NOW + n for n in range(12)]


async def test_a_version_1_database_starts_each_tenants_clock_at_its_largest_created_at(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    backend = await open_stopped(forklog_db, opened, NOW + 50)
    await backend.create(SessionKey("a", "late"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    for session_id in ("b1", "b2"):
        await backend.create(SessionKey("b", session_id), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    await backend.close()
    opened.clear()
    # What version 1 left: the one clock all tenants shared, and no clock per tenant.
    await scalar(forklog_db, "DROP TABLE forklog_tenant_clocks")
    await scalar(forklog_db, "ALTER TABLE forklog_sessions DROP COLUMN bytes")  # schema version 3's
    await scalar(forklog_db, "ALTER TABLE forklog_sessions DROP COLUMN updated_at")  # and 4's (its index with it)
    await scalar(forklog_db, "DROP TABLE forklog_search")  # and 5's
    await scalar(forklog_db, "DROP TABLE forklog_state_fill")  # and 6's
    await scalar(forklog_db, "ALTER TABLE forklog_sessions DROP COLUMN changed_at")  # and 8's
    await scalar(forklog_db, "DROP TABLE forklog_stats_fill")  # and the stats' (spec 17)
    await scalar(forklog_db, "ALTER TABLE forklog_sessions DROP COLUMN archived")  # and archive's
    await scalar(forklog_db, "UPDATE forklog_schema SET version = 1")
    backend = await open_stopped(forklog_db, opened)
    assert await scalar(forklog_db, "SELECT version FROM forklog_schema") == SCHEMA_VERSION
    made = await backend.create(SessionKey("a", "next"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    assert made.header.created_at == NOW + 51
    made = await backend.create(SessionKey("b", "b3"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    assert made.header.created_at == NOW + 52
    made = await backend.create(SessionKey("c", "first"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    assert made.header.created_at == NOW


async def test_a_version_6_database_counts_each_sessions_last_change_from_its_activity_never_the_future(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    """Retention counts from the last change the server acknowledged (spec 14), a column version 8 adds: a session an
    older forklog stored counts from its last activity, or from the upgrade where that lies in the future."""
    backend = await open_on(forklog_db, opened)
    year_2100_ms = 4_102_444_800_000
    timed = {"past": NOW, "future": year_2100_ms}
    for session_id, first_time in timed.items():
        seed = [{**event, "seq": seq, "time": first_time + seq} for seq, event in enumerate(turn(1))]
        await backend.create(key(session_id), new_instance(), {}, SeedLog(seed_log(seed, now=NOW)))
    await backend.close()
    opened.clear()
    await scalar(forklog_db, "ALTER TABLE forklog_sessions DROP COLUMN changed_at")  # what version 7 left
    await scalar(forklog_db, "DROP TABLE forklog_stats_fill")  # (spec 17's migrations come after it)
    await scalar(forklog_db, "ALTER TABLE forklog_sessions DROP COLUMN archived")
    await scalar(forklog_db, "UPDATE forklog_schema SET version = 7")
    upgraded_at = wall_clock_ms()

    backend = await open_on(forklog_db, opened)

    past, future = [await backend.find(key(session_id)) for session_id in timed]
    assert past is not None and future is not None
    assert past.changed_at == past.updated_at == past.header.created_at < upgraded_at
    assert upgraded_at <= future.changed_at <= wall_clock_ms() < future.updated_at


async def test_other_replicas_changes_are_reported_and_own_ones_are_not(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    first = await open_on(forklog_db, opened, poll_interval=0.2)
    second = await open_on(forklog_db, opened, poll_interval=0.2)
    heard: dict[str, list[SessionKey]] = {"first": [], "second": []}
    first.listen(heard["first"].append)
    second.listen(heard["second"].append)
    await asyncio.sleep(0.5)  # both feeds listening

    async def reported_after(change: Any) -> None:
        """Run ``change`` through the first replica; the second hears of it within a second."""
        before = len(heard["second"])
        await change
        deadline = time.monotonic() + 1.0
        while len(heard["second"]) == before:
            assert time.monotonic() < deadline, heard
            await asyncio.sleep(0.01)

    await reported_after(first.create(key("s"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW))))
    await reported_after(grow(first, "s", range(2, 3)))
    await reported_after(first.delete(key("s")))
    assert set(heard["second"]) == {key("s")}
    await asyncio.sleep(0.5)
    assert heard["first"] == []  # never its own changes


async def test_a_change_without_a_notification_is_found_by_the_poll(
    forklog_db: str, opened: list[PostgresBackend]
) -> None:
    backend = await open_on(forklog_db, opened, poll_interval=0.2)
    await backend.create(key("s"), new_instance(), {}, SeedLog(seed_log([], now=NOW)))
    heard: list[SessionKey] = []
    backend.listen(heard.append)
    await asyncio.sleep(0.5)
    # What another replica's append does to the row, with no NOTIFY at all (as if it were lost).
    await scalar(forklog_db, "UPDATE forklog_sessions SET change_seq = nextval('forklog_changes') RETURNING 1")
    deadline = time.monotonic() + 2.0
    while not heard:
        assert time.monotonic() < deadline, "the poll did not find the change"
        await asyncio.sleep(0.05)
    assert heard == [key("s")]


# -- an unavailable database -------------------------------------------------------------------------------------------


async def test_a_database_that_goes_away_answers_storage_unavailable_then_serves_again(
    forklog_db: str, pg_cluster: PostgresCluster, opened: list[PostgresBackend]
) -> None:
    backend = await open_on(forklog_db, opened, pool=PoolSettings(acquire_timeout=2.0, connect_timeout=2.0))
    await backend.create(key("s"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    await asyncio.to_thread(pg_cluster.stop, "immediate")
    began = time.monotonic()
    for attempt in (backend.find(key("s")), backend.readiness(), grow(backend, "s", range(2, 3))):
        with pytest.raises(StorageUnavailable):
            await attempt
    assert time.monotonic() - began < 10
    await asyncio.to_thread(pg_cluster.start)
    deadline = time.monotonic() + 10
    while True:
        try:
            await grow(backend, "s", range(2, 3))
            break
        except StorageUnavailable:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
    assert (await backend.find(key("s"))).head.count == 16  # type: ignore[union-attr]
