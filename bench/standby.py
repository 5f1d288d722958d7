"""Reads through a hot standby beside reads from the primary (BENCH_ONLY=standby; spec 6, Read replicas).

A throwaway primary and an asynchronous hot standby (``pg_basebackup -R``, no apply delay: caught up) are started as
the tests start them (``tests/support/replication.py``); one forklog process reads from the primary, another from the
standby (``FORKLOG_READ_DATABASE_URL``), both on the same database. One keep-alive client times sequential
``GET /sessions/{id}`` and ``GET /sessions/{id}/events`` requests on each, one on each in turn (BENCH_STANDBY_READS
each), first with nothing else running, then while another client appends one event at a time through a third
process (the standby read then waits for the standby to replay the newest commit). The figure is what a standby
read adds: the primary's WAL position (one query a round, shared by the reads that arrived before it), the standby's
replay position on the read's own connection, and any wait for replay.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bench.report import Row, skipped
from bench.util import Client, env_int, log, running, start_forklog
from tests.support.postgres import PostgresError, find_server_bindir
from tests.support.replication import DelayedStandby

__all__ = ["run"]

SECTION = "PostgreSQL standby reads"


def _timed(client: Client, path: str, count: int) -> list[float]:
    took = []
    for _ in range(count):
        began = time.perf_counter()
        status, _ = client.call("GET", path)
        took.append(time.perf_counter() - began)
        assert status == 200, status
    return took


def _p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1]


def _compare(primary: Client, standby: Client, path: str, count: int) -> tuple[list[float], list[float]]:
    on_primary: list[float] = []
    on_standby: list[float] = []
    for _ in range(count):  # one each in turn: the machine's load changes both alike
        on_primary += _timed(primary, path, 1)
        on_standby += _timed(standby, path, 1)
    return on_primary, on_standby


def _row(measure: str, on_primary: list[float], on_standby: list[float], note: str) -> Row:
    standby_ms, primary_ms = statistics.median(on_standby) * 1000, statistics.median(on_primary) * 1000
    return Row(
        SECTION,
        measure,
        f"{standby_ms:.2f} ms (p90 {_p90(on_standby) * 1000:.2f})",
        baseline="the same read from the primary",
        baseline_value=f"{primary_ms:.2f} ms (p90 {_p90(on_primary) * 1000:.2f})",
        ratio=standby_ms / primary_ms,
        note=note,
    )


def run(work: Path) -> list[Row]:
    if find_server_bindir() is None:
        return [skipped(SECTION, "reads", "no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup)")]
    count = env_int("BENCH_STANDBY_READS", 2000)
    pair = DelayedStandby(delay="0")
    try:
        pair.start()
    except PostgresError as exc:
        return [skipped(SECTION, "reads", f"the standby did not start: {exc}")]
    rows: list[Row] = []
    try:
        database = ("--database-url", pair.primary_url())
        reads_standby = (*database, "--read-database-url", pair.standby_url())
        with (
            running(start_forklog(work / "p", work / "primary.log", extra=database)) as on_primary,
            running(start_forklog(work / "s", work / "standby.log", extra=reads_standby)) as on_standby,
            running(start_forklog(work / "w", work / "writer.log", extra=database)) as writer,
        ):
            for server in (on_primary, on_standby, writer):
                server.wait_ready()
            primary, standby, appender = Client(on_primary.port), Client(on_standby.port), Client(writer.port)
            assert appender.call("POST", "/sessions", {"id": "read"})[0] == 201
            assert appender.call("POST", "/sessions", {"id": "written"})[0] == 201
            note = {"type": "bench/note", "data": {"text": "x" * 200}}
            assert appender.call("POST", "/sessions/read/events", {"events": [note] * 100})[0] == 201
            time.sleep(1.0)
            log(f"standby reads: {count} reads of each kind on each server, idle")
            for path, name in (("/sessions/read", "GET /sessions/{id}"), ("/sessions/read/events", "GET events")):
                rows.append(_row(f"{name}, idle, caught up", *_compare(primary, standby, path, count), "1 client"))

            stop = threading.Event()
            appended = 0

            def keep_appending() -> None:
                nonlocal appended
                client = Client(writer.port)
                while not stop.is_set():
                    client.call("POST", "/sessions/written/events", {"events": [note]})
                    appended += 1

            thread = threading.Thread(target=keep_appending, daemon=True)
            thread.start()
            began = time.monotonic()
            try:
                log("standby reads: while another client appends")
                on_p, on_s = _compare(primary, standby, "/sessions/read", count)
            finally:
                stop.set()
                thread.join(timeout=10)
            rate = appended / (time.monotonic() - began)
            rows.append(_row("GET /sessions/{id}, while appends run", on_p, on_s, f"{rate:.0f} appends/s meanwhile"))
    finally:
        pair.close()
    return rows


if __name__ == "__main__":
    from bench.report import render

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        print(render(run(Path(folder)), SECTION))
