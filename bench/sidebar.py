"""The sidebar (spec 12): the first page by ``order=updated`` and a two-word search at 10k and 100k sessions, and
appends with the search index kept beside them and without it.

    python -m bench.sidebar [N ...]     # default 10000 100000

Sessions of one turn each are created through the file backend (no fsync) in one process; the service then runs
in that process and each figure is the median server time of a request through the ASGI app (no network), after
the search index has caught up. The two-word search names words only one session holds (its matches fit a page).
Appends: one-event batches to 100 sessions for ``BENCH_APPEND_SECONDS`` (default 5) each way, the search index's
background rounds running (on) or stopped (off).

On PostgreSQL (a throwaway cluster, fsync off): the first page by ``order=updated`` on empty sessions, and the
two-word search on one-turn sessions copied in SQL from one made through the backend (its events, checkpoint and
search row, each copy with its own words), served by the app on that database with PostgreSQL's full-text search;
appends with the search on and off as above.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.files import FileBackend
from app.backends.postgres import PostgresBackend
from app.backends.postgres.state import encode_state
from app.backends.search.engine import tag_of
from app.domain.clock import wall_clock_ms
from app.domain.dsh_records import encode_header
from app.domain.log import seed_log
from app.domain.log_state import LogState
from app.domain.session import SessionHeader, SessionKey
from app.service.sessions import SessionService
from bench.report import Row, skipped
from bench.util import env_int, log
from tests.support.postgres import PostgresCluster, PostgresError, fresh_database_name

RUNS = 25
CREATED_AT = 1_785_331_618_309


def _turn(number: int) -> list[dict[str, Any]]:
    return [
        {"type": "turn/start", "data": {"turn": 1}},
        {
            "type": "user/message",
            "surfaceOp": "append",
            "data": {
                "id": "u1",
                "role": "user",
                "content": [{"type": "text", "text": f"please deploy service{number} to region{number} today"}],
                "source": {"kind": "user"},
            },
        },
        {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
    ]


def _fill(data: Path, count: int) -> None:
    """Write ``count`` one-turn sessions straight into ``data/sessions`` (as bench.small does: a start reads them)."""
    sessions = data / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        header = SessionHeader(id=f"s{number}", created_at=CREATED_AT + number, instance=uuid.uuid4().hex, cwd="/work")
        lines = seed_log(_turn(number), now=CREATED_AT + number).lines()
        (sessions / f"s{number}.jsonl").write_bytes(encode_header(header) + lines)


async def _ready(service: SessionService, *, indexed: bool = True) -> float:
    """Seconds until the started service is ready (and, with ``indexed``, its search index current)."""
    started = time.perf_counter()
    while not service.ready:
        await asyncio.sleep(0.01)
    while indexed and not service.searcher.caught_up:
        await asyncio.sleep(0.05)
    return time.perf_counter() - started


async def _median_ms(client: httpx.AsyncClient, params: dict[str, Any]) -> tuple[float, int]:
    times = []
    found = 0
    for _ in range(RUNS):
        started = time.perf_counter()
        response = await client.get("/sessions", params=params)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
        found = len(response.json()["items"])
    return statistics.median(times), found


async def _listing(count: int, folder: Path) -> list[Row]:
    data = folder / f"data-{count}"
    started = time.perf_counter()
    _fill(data, count)
    log(f"sidebar: {count} sessions written in {time.perf_counter() - started:.1f} s")
    app = create_app(Settings(data_dir=data, fsync=False, log_level="warning"))
    service: SessionService = app.state.service
    rows = []
    async with app.router.lifespan_context(app):
        log(f"sidebar: started and indexed in {await _ready(service):.1f} s")
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            first, found = await _median_ms(client, {"order": "updated", "limit": 50})
            rows.append(
                Row(
                    "sidebar",
                    f"first page of 50 by order=updated, {count:,} sessions",
                    f"{first:.1f} ms",
                    target="<= 20 ms",
                    met=first <= 20 and found == 50,
                )
            )
            number = count // 2
            search, found = await _median_ms(client, {"q": f"service{number} region{number}"})
            rows.append(
                Row(
                    "sidebar",
                    f"two-word search, {count:,} one-turn sessions",
                    f"{search:.1f} ms",
                    target="<= 50 ms",
                    met=search <= 50 and found == 1,
                )
            )
    return rows


async def _append_load(
    service: SessionService, seconds: float, *, search: bool, seed: Callable[[int], list[Any]], note: list[Any]
) -> float:
    """Appends per second of one event (``note``) a batch by 100 writers, each to its own session started with
    ``seed(number)``, on a started ``service`` whose search index runs or not; the service is stopped after."""
    try:
        if not search:
            await service.searcher.stop()
        for number in range(100):
            await service.create("default", f"a{number}", seed(number), None)
        done = 0
        deadline = time.perf_counter() + seconds

        async def writer(number: int) -> None:
            nonlocal done
            session = SessionKey("default", f"a{number}")
            while time.perf_counter() < deadline:
                await service.append(session, note)
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(writer(number) for number in range(100)))
        return done / (time.perf_counter() - started)
    finally:
        await service.stop()


async def _appends(folder: Path, seconds: float, *, search: bool) -> float:
    backend = FileBackend(folder, clock=wall_clock_ms, sync=False)
    service = SessionService(backend, search_index=folder / "search" / "search.sqlite3")
    await service.start()
    note = [{"type": "forklog-bench/note", "data": {"text": "more words for the index"}}]
    return await _append_load(service, seconds, search=search, seed=lambda number: [], note=note)


_PG_FILL = """
INSERT INTO forklog_sessions (tenant, id, instance, created_at, delegation_depth, log, count, state, change_seq,
                              updated_at)
SELECT 'default', 's' || n, md5(n::text), $1::bigint + n, 0, n, 0, $2, n, $1::bigint + n + (n * 7919) % 100000
FROM generate_series(1, $3) AS n
"""


async def _postgres_listing(count: int) -> list[Row]:
    """The first page by order=updated on PostgreSQL: ``count`` empty sessions put straight into the table (with
    updatedAt in a shuffled order), served by the app on that database."""
    try:
        cluster = PostgresCluster(fsync=False)
        cluster.start()
    except PostgresError as exc:
        return [skipped("sidebar", f"first page by order=updated on PostgreSQL, {count:,} sessions", str(exc))]
    try:
        url = cluster.url(cluster.create_database(fresh_database_name("forklog_sidebar")))
        backend = PostgresBackend(url, clock=wall_clock_ms)
        await backend.open()
        await backend.close()
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(_PG_FILL, CREATED_AT, encode_state(LogState()), count)
            await conn.execute("ANALYZE forklog_sessions")
        finally:
            await conn.close()
        app = create_app(Settings(database_url=url, log_level="warning"))
        service: SessionService = app.state.service
        async with app.router.lifespan_context(app):
            await _ready(service, indexed=False)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                first, found = await _median_ms(client, {"order": "updated", "limit": 50})
        return [
            Row(
                "sidebar",
                f"first page of 50 by order=updated on PostgreSQL, {count:,} sessions",
                f"{first:.1f} ms",
                target="<= 20 ms",
                met=first <= 20 and found == 50,
            )
        ]
    finally:
        cluster.close()


# Copies of the session s0 (made through the backend) as s1 .. s{N-1}, each with its own log, events, checkpoint and
# search row: its words service0 and region0 become service{n} and region{n} (each after the tenant's tag, $2). Its
# one turn is a pack under 1 KiB, stored as it is (not compressed), so its text can be edited here.
_PG_COPY = """
CREATE TEMP TABLE numbers AS SELECT n FROM generate_series(1, $1::int - 1) AS n;
CREATE TEMP TABLE template AS SELECT * FROM forklog_sessions WHERE id = 's0';
CREATE TEMP TABLE log_copies AS SELECT l.*, n FROM forklog_logs l, numbers WHERE l.id = (SELECT log FROM template);
UPDATE log_copies SET id = 1000000 + n, session_id = 's' || n, instance = md5(n::text);
ALTER TABLE log_copies DROP COLUMN n;
INSERT INTO forklog_logs SELECT * FROM log_copies;
INSERT INTO forklog_events (log, seq, line)
    SELECT 1000000 + n, seq, replace(line, 'service0 to region0', 'service' || n || ' to region' || n)
    FROM forklog_events, numbers WHERE log = (SELECT log FROM template);
INSERT INTO forklog_packs (log, seq, count, size, compressed, body)
    SELECT 1000000 + n, seq, count, octet_length(copied.body), false, copied.body
    FROM forklog_packs, numbers, LATERAL (SELECT convert_to(replace(convert_from(body, 'UTF8'), 'service0 to region0',
        'service' || n || ' to region' || n), 'UTF8') AS body) AS copied
    WHERE log = (SELECT log FROM template);
INSERT INTO forklog_surface (log, seq, start_seq, end_seq)
    SELECT 1000000 + n, seq, start_seq, end_seq FROM forklog_surface, numbers WHERE log = (SELECT log FROM template);
INSERT INTO forklog_turn_ends (log, seq, time, checkpoint)
    SELECT 1000000 + n, seq, time, checkpoint FROM forklog_turn_ends, numbers WHERE log = (SELECT log FROM template);
CREATE TEMP TABLE session_copies AS SELECT t.*, n FROM template t, numbers;
UPDATE session_copies SET id = 's' || n, instance = md5(n::text), log = 1000000 + n, created_at = created_at + n,
    updated_at = updated_at + n, change_seq = nextval('forklog_changes'),
    state = replace(state, 'service0 to region0', 'service' || n || ' to region' || n);
ALTER TABLE session_copies DROP COLUMN n;
INSERT INTO forklog_sessions SELECT * FROM session_copies;
INSERT INTO forklog_search (tenant, id, instance, count, size, words)
    SELECT 'default', 's' || n, md5(n::text), x.count, x.size,
        array_to_tsvector(
            array_remove(array_remove(tsvector_to_array(x.words), $2::text || 'service0'), $2::text || 'region0')
            || array[$2::text || 'service' || n, $2::text || 'region' || n]
        )
    FROM forklog_search x, numbers WHERE x.id = 's0';
"""


async def _pg_cluster() -> PostgresCluster | str:
    try:
        cluster = PostgresCluster(fsync=False)
        cluster.start()
    except PostgresError as exc:
        return str(exc)
    return cluster


async def _postgres_search(count: int) -> list[Row]:
    """The two-word search on PostgreSQL's full-text search, ``count`` one-turn sessions."""
    measure = f"two-word search on PostgreSQL, {count:,} one-turn sessions"
    cluster = await _pg_cluster()
    if isinstance(cluster, str):
        return [skipped("sidebar", measure, cluster)]
    try:
        url = cluster.url(cluster.create_database(fresh_database_name("forklog_search")))
        service = SessionService(PostgresBackend(url, clock=wall_clock_ms))
        await service.start()
        await service.create("default", "s0", _turn(0), {"cwd": "/work"})
        await _ready(service)
        await service.stop()
        started = time.perf_counter()
        conn = await asyncpg.connect(url)
        try:
            tag = f"'{tag_of('default')}'"  # hex digits: nothing to escape
            await conn.execute(_PG_COPY.replace("$1::int", str(int(count))).replace("$2::text", tag))
            await conn.execute("VACUUM ANALYZE")
        finally:
            await conn.close()
        log(f"sidebar: {count} sessions copied on PostgreSQL in {time.perf_counter() - started:.1f} s")
        app = create_app(Settings(database_url=url, log_level="warning"))
        service = app.state.service
        async with app.router.lifespan_context(app):
            log(f"sidebar: started on PostgreSQL, index found current in {await _ready(service):.2f} s")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
                number = count // 2
                search, found = await _median_ms(client, {"q": f"service{number} region{number}"})
        return [Row("sidebar", measure, f"{search:.1f} ms", target="<= 50 ms", met=search <= 50 and found == 1)]
    finally:
        cluster.close()


async def _postgres_appends(seconds: float, *, search: bool) -> float | str:
    """Appends per second on PostgreSQL (100 sessions, one event a batch), the search's rounds running or not."""
    cluster = await _pg_cluster()
    if isinstance(cluster, str):
        return cluster
    try:
        url = cluster.url(cluster.create_database(fresh_database_name("forklog_appends")))
        service = SessionService(PostgresBackend(url, clock=wall_clock_ms))
        await service.start()
        note = [{"type": "forklog-bench/note", "data": {"text": "more words"}}]
        return await _append_load(service, seconds, search=search, seed=_turn, note=note)
    finally:
        cluster.close()


def _append_rows(where: str, without: float, with_search: float) -> list[Row]:
    ratio = with_search / without
    return [
        Row("sidebar", f"appends/s{where}, search index off", f"{without:,.0f}"),
        Row(
            "sidebar",
            f"appends/s{where}, search index on",
            f"{with_search:,.0f}",
            "index off",
            f"{without:,.0f}",
            ratio=ratio,
            target=">= 0.9x",
            met=ratio >= 0.9,
        ),
    ]


def run(folder: Path) -> list[Row]:
    sizes = [int(size) for size in os.environ.get("BENCH_SIDEBAR_SESSIONS", "10000,100000").split(",")]
    rows: list[Row] = []
    for size in sizes:
        rows += asyncio.run(_listing(size, folder))
        rows += asyncio.run(_postgres_listing(size))
        rows += asyncio.run(_postgres_search(size))
    seconds = env_int("BENCH_APPEND_SECONDS", 5)
    without = asyncio.run(_appends(folder / "appends-off", seconds, search=False))
    with_search = asyncio.run(_appends(folder / "appends-on", seconds, search=True))
    rows += _append_rows("", without, with_search)
    pg_without = asyncio.run(_postgres_appends(seconds, search=False))
    pg_with = asyncio.run(_postgres_appends(seconds, search=True))
    if isinstance(pg_without, str) or isinstance(pg_with, str):
        rows.append(skipped("sidebar", "appends/s on PostgreSQL, search index on and off", str(pg_without)))
    else:
        rows += _append_rows(" on PostgreSQL", pg_without, pg_with)
    return rows


if __name__ == "__main__":
    if len(sys.argv) > 1:
        os.environ["BENCH_SIDEBAR_SESSIONS"] = ",".join(sys.argv[1:])
    with tempfile.TemporaryDirectory() as place:
        for row in run(Path(place)):
            print(f"{row.measure}: {row.value} {row.target} {'' if row.met is None else row.met}")
