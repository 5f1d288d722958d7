"""Read replicas (spec 6): a backend given FORKLOG_READ_DATABASE_URL serves standby reads from a hot standby once it
has replayed every change acknowledged before the read (by any backend), waits for it at most the read lag allowed,
and passes a lost, lagging or promoted standby over for the primary without an error.

The standby here applies each commit 300 ms after it was made (``recovery_min_apply_delay``): a read that did not
wait for it would miss the write just acknowledged."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from app.backends.base import SeedLog
from app.backends.observer import StorageObserver
from app.backends.postgres import PostgresBackend
from app.backends.postgres.read_replicas import CHECK_TIMEOUT, RETRY_LOST, RoundQuery
from app.backends.read_routing import read_from_now, standby_reads
from app.domain.clock import wall_clock_ms
from app.domain.ids import new_instance
from app.domain.log import seed_log
from app.domain.session import DEFAULT_TENANT, SessionKey
from app.domain.staging_rules import stage
from tests.backends.test_contract import NOW, turn
from tests.support.postgres import find_server_bindir
from tests.support.replication import DelayedStandby, server_processes

pytestmark = pytest.mark.anyio

APPLY_DELAY = 0.3  # seconds: the standby's recovery_min_apply_delay


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def replica() -> Iterator[DelayedStandby]:
    if find_server_bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup)")
    pair = DelayedStandby(delay=f"{int(APPLY_DELAY * 1000)}ms")
    try:
        yield pair.start()
    finally:
        pair.close()


class ServedBy(StorageObserver):
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def standby_read(self, server: str) -> None:
        self.counts[server] += 1


@pytest.fixture
async def backends() -> AsyncIterator[list[PostgresBackend]]:
    opened: list[PostgresBackend] = []
    yield opened
    for backend in opened:
        await backend.close()


async def open_on(url: str, kept: list[PostgresBackend], **options: Any) -> PostgresBackend:
    backend = PostgresBackend(url, clock=wall_clock_ms, **options)
    await backend.open()
    kept.append(backend)
    return backend


async def reader_of(
    replica: DelayedStandby, kept: list[PostgresBackend], lag_max: float
) -> tuple[PostgresBackend, ServedBy]:
    reader = await open_on(replica.primary_url(), kept, read_url=replica.standby_url(), read_lag_max=lag_max)
    served = ServedBy()
    reader.observer = served
    return reader, served


def key(session_id: str) -> SessionKey:
    return SessionKey(DEFAULT_TENANT, session_id)


async def timed_find(backend: PostgresBackend, session_id: str) -> tuple[bool, float]:
    began = time.monotonic()
    with standby_reads():
        found = await backend.find(key(session_id))
    return found is not None, time.monotonic() - began


# -- the primary's position, asked in rounds -------------------------------------------------------------------------


async def test_one_position_query_serves_every_read_that_arrived_before_it_was_sent() -> None:
    asked: list[float] = []

    async def position() -> int:
        asked.append(time.monotonic())
        await asyncio.sleep(0.02)
        return len(asked)

    rounds = RoundQuery(position)
    arrived = time.monotonic()
    first = await asyncio.gather(*(rounds.after(arrived) for _ in range(200)))
    assert first == [1] * 200 and rounds.rounds == 1

    # Reads that arrive while a round is in flight are not served by it (it may predate their writes' commits): they
    # share the next round, one query for all of them.
    in_flight = asyncio.ensure_future(rounds.after(time.monotonic()))
    await asyncio.sleep(0.005)
    later = await asyncio.gather(*(rounds.after(time.monotonic()) for _ in range(100)))
    assert await in_flight == 2
    assert later == [3] * 100 and rounds.rounds == 3


# -- read-your-writes ------------------------------------------------------------------------------------------------


async def test_a_standby_read_sees_a_create_another_backend_just_acknowledged(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    writer = await open_on(replica.primary_url(), backends)
    reader, served = await reader_of(replica, backends, lag_max=5.0)

    for number in range(3):
        await writer.create(key(f"fresh-{number}"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
        found, seconds = await timed_find(reader, f"fresh-{number}")
        assert found, "the standby read missed the create acknowledged just before it"
        assert seconds >= APPLY_DELAY * 0.5, f"answered in {seconds:.3f} s: it did not wait for the standby's replay"
    assert served.counts == {"standby": 3}


async def test_an_append_is_seen_by_the_next_standby_read_of_its_events(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    writer = await open_on(replica.primary_url(), backends)
    reader, served = await reader_of(replica, backends, lag_max=5.0)
    await writer.create(key("grown"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    tip = await writer.tip(key("grown"), refresh=True)
    assert tip is not None
    await writer.append(key("grown"), stage(tip.log, turn(2), appended=True, now=NOW))
    count = len(seed_log(turn(1) + turn(2), now=NOW))

    with standby_reads():
        session = await reader.find(key("grown"))
        assert session is not None and session.head.count == count
        lines = await reader.read(key("grown"), 0, count)
    assert lines.count(b"\n") == count
    assert served.counts["standby"] >= 2 and served.counts["primary"] == 0


async def test_a_caught_up_standby_serves_reads_at_once(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    writer = await open_on(replica.primary_url(), backends)
    reader, served = await reader_of(replica, backends, lag_max=5.0)
    await writer.create(key("settled"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    await asyncio.sleep(APPLY_DELAY * 2)

    timings = [await timed_find(reader, "settled") for _ in range(20)]

    assert all(found for found, _ in timings)
    assert sorted(seconds for _, seconds in timings)[len(timings) // 2] < APPLY_DELAY / 3  # no wait for a replay
    assert served.counts == {"standby": 20}


async def test_a_stream_look_after_a_change_waits_for_that_change(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    writer = await open_on(replica.primary_url(), backends)
    reader, _ = await reader_of(replica, backends, lag_max=5.0)
    with standby_reads():
        assert await reader.find(key("later")) is None  # the request's first look: nothing yet
        await writer.create(key("later"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
        read_from_now()  # as a tail does when it is woken by the change
        assert await reader.find(key("later")) is not None


# -- the primary instead ---------------------------------------------------------------------------------------------


async def test_a_standby_lagging_past_the_lag_allowed_passes_reads_to_the_primary(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    writer = await open_on(replica.primary_url(), backends)
    reader, served = await reader_of(replica, backends, lag_max=0.05)

    await writer.create(key("hurried"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    found, seconds = await timed_find(reader, "hurried")

    assert found
    assert seconds >= 0.05, f"answered in {seconds:.3f} s: it did not wait for the standby first"
    assert served.counts == {"primary": 1}  # not the standby, which holds the create only 0.3 s after it


async def test_a_stopped_standby_costs_no_error_and_serves_again_once_back(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    writer = await open_on(replica.primary_url(), backends)
    reader, served = await reader_of(replica, backends, lag_max=5.0)
    await writer.create(key("kept"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    assert (await timed_find(reader, "kept"))[0]
    assert served.counts == {"standby": 1}

    replica.standby.stop("immediate")
    try:
        for _ in range(5):
            found, seconds = await timed_find(reader, "kept")
            assert found and seconds < 1.0
        assert served.counts == {"standby": 1, "primary": 5}
    finally:
        replica.standby.start()

    deadline = time.monotonic() + 30
    while served.counts["standby"] < 2:
        assert time.monotonic() < deadline, "the standby never served reads again"
        assert (await timed_find(reader, "kept"))[0]
        await asyncio.sleep(RETRY_LOST / 4)


async def test_a_read_url_that_names_a_primary_reads_from_the_primary(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    reader = await open_on(replica.primary_url(), backends, read_url=replica.primary_url(), read_lag_max=1.0)
    served = ServedBy()
    reader.observer = served
    await reader.create(key("mine"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))

    assert (await timed_find(reader, "mine"))[0]
    assert served.counts == {"primary": 1}


async def test_concurrent_standby_reads_share_the_primary_position_questions(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    writer = await open_on(replica.primary_url(), backends)
    reader, served = await reader_of(replica, backends, lag_max=5.0)
    await writer.create(key("popular"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    replicas = reader.replicas
    assert replicas is not None

    found = await asyncio.gather(*(timed_find(reader, "popular") for _ in range(200)))

    assert all(seen for seen, _ in found)
    assert served.counts == {"standby": 200}
    assert replicas.fences.rounds <= 5, f"{replicas.fences.rounds} questions to the primary for 200 reads"


async def test_a_paused_standby_costs_a_second_at_most_and_no_error(
    replica: DelayedStandby, backends: list[PostgresBackend]
) -> None:
    writer = await open_on(replica.primary_url(), backends)
    reader, served = await reader_of(replica, backends, lag_max=5.0)
    await writer.create(key("paused"), new_instance(), {}, SeedLog(seed_log(turn(1), now=NOW)))
    assert (await timed_find(reader, "paused"))[0]  # a connection to the standby is open in the reader's pool

    stopped = server_processes(replica.standby)
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)  # its sockets stay open and answer nothing: a network cut
    try:
        timings = [await timed_find(reader, "paused") for _ in range(3)]
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)

    assert all(found for found, _ in timings)
    assert timings[0][1] < 2 * CHECK_TIMEOUT, timings  # the standby's silence, bounded
    assert max(seconds for _, seconds in timings[1:]) < 0.5, timings  # then passed over at once
    assert served.counts == {"standby": 1, "primary": 3}
