"""PostgreSQL bytes at rest (BENCH_ONLY=pg_bytes): what realistic streamed sessions cost in the database.

A throwaway cluster (fsync off: the figure is of bytes, not of time) and one forklog on it; sessions of
bench/streamed.py's turns are appended over HTTP, one append a step (one database) and one append an event (another
database), a thread a session. Then the growth of forklog's relations (``pg_total_relation_size``: tables, indexes,
TOAST) and of ``pg_database_size`` since the schema was made is set against the raw JSONL bytes of the same
sessions (their header and event lines, as ``GET …/events`` reads them back), a second after the last append (time
for the background packing of the last turns). **Target (spec 16): <= 0.35x both ways.**
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import orjson
import psycopg

from bench.postgres import start_on_database
from bench.report import Row, skipped
from bench.streamed import turn_steps
from bench.util import Client, env_int, human_bytes, log, running
from tests.support.postgres import PostgresCluster, PostgresError, fresh_database_name

__all__ = ["run"]

SECTION = "PostgreSQL bytes at rest"
SETTLE_SECONDS = 2.0
_RELATIONS = (
    "SELECT coalesce(sum(pg_total_relation_size(oid)), 0) FROM pg_class WHERE relkind = 'r' AND relname LIKE 'forklog%'"
)


_EACH = (
    "SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relkind = 'r' AND relname LIKE 'forklog%' "
    "ORDER BY 2 DESC LIMIT 6"
)


def _largest(url: str) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        return ", ".join(f"{name[8:]} {human_bytes(size)}" for name, size in conn.execute(_EACH).fetchall())


def _sizes(url: str) -> tuple[int, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        relations = conn.execute(_RELATIONS).fetchone()
        database = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert relations is not None and database is not None
    return int(relations[0]), int(database[0])


def _write_session(port: int, session_id: str, turns: int, per_event: bool, seed: int) -> None:
    client = Client(port)
    rng = random.Random(seed)
    client.expect(201, "POST", "/sessions", {"id": session_id})
    count = 0
    for turn in range(1, turns + 1):
        for step in turn_steps(turn, count, rng):
            batches = [[event] for event in step] if per_event else [step]
            for batch in batches:
                client.expect(201, "POST", f"/sessions/{session_id}/events", {"events": batch})
            count += len(step)
    client.close()


def _raw_bytes(port: int, session_id: str) -> tuple[int, int]:
    """The session's raw JSONL bytes (its header line and event lines) and its event count."""
    client = Client(port)
    session = orjson.loads(client.expect(200, "GET", f"/sessions/{session_id}"))
    total, start, events = 0, 0, 0
    while True:
        page = orjson.loads(client.expect(200, "GET", f"/sessions/{session_id}/events?from={start}&limit=10000"))
        total += sum(len(orjson.dumps(event)) + 1 for event in page["events"])
        events += len(page["events"])
        start = page["nextSeq"]
        if start >= page["eventCount"]:
            break
    client.close()
    header = session.get("header", session)
    return total + len(orjson.dumps(header)) + 1, events


def measure(work: Path, url: str, *, per_event: bool, sessions: int, turns: int) -> tuple[int, int, int, int, float]:
    """(raw bytes, events, relations' growth, database's growth, seconds writing) of one way of appending."""
    how = "event" if per_event else "step"
    server = start_on_database(url, work / "logs" / f"pg-bytes-{how}.log")
    with running(server):
        server.wait_ready()
        before = _sizes(url)
        started = time.perf_counter()
        threads = [
            threading.Thread(target=_write_session, args=(server.port, f"bytes-{how}-{i}", turns, per_event, i))
            for i in range(sessions)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        writing = time.perf_counter() - started
        time.sleep(SETTLE_SECONDS)
        after = _sizes(url)
        log(f"pg_bytes: the largest relations: {_largest(url)}")
        raw = events = 0
        for i in range(sessions):
            session_raw, session_events = _raw_bytes(server.port, f"bytes-{how}-{i}")
            raw += session_raw
            events += session_events
    return raw, events, after[0] - before[0], after[1] - before[1], writing


def run(work: Path) -> list[Row]:
    sessions = env_int("BENCH_PG_BYTES_SESSIONS", 4)
    turns = env_int("BENCH_PG_BYTES_TURNS", 30)
    try:
        cluster = PostgresCluster()
        cluster.start()
    except PostgresError as exc:
        log(f"pg_bytes: no server ({exc})")
        return [skipped(SECTION, "every row", "no PostgreSQL server binaries")]
    rows: list[Row] = []
    try:
        for per_event in (False, True):
            name = cluster.create_database(fresh_database_name("forklog_bytes"))
            raw, events, relations, database, writing = measure(
                work, cluster.url(name), per_event=per_event, sessions=sessions, turns=turns
            )
            how = "one append an event" if per_event else "one append a step"
            ratio = relations / raw
            log(
                f"pg_bytes, {how}: {events:,} events, raw {human_bytes(raw)} ({raw / events:.0f} B an event); "
                f"relations +{human_bytes(relations)} ({relations / events:.0f} B an event), database "
                f"+{human_bytes(database)}; written in {writing:.1f} s"
            )
            rows.append(
                Row(
                    SECTION,
                    f"{how}: database growth",
                    f"{human_bytes(relations)}",
                    "raw JSONL",
                    f"{human_bytes(raw)}",
                    ratio,
                    "<= 0.35x",
                    ratio <= 0.35,
                    f"{sessions} sessions, {events:,} events ({raw / events:.0f} B raw, {relations / events:.0f} B "
                    f"stored an event); pg_database_size +{database / raw:.2f}x",
                )
            )
            cluster.drop_database(name)
    finally:
        cluster.close()
    return rows
