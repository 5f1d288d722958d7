"""PostgreSQL beside the file backend, in one run (BENCH_ONLY=postgres): appends, batches, forks, a cold replica.

A throwaway PostgreSQL cluster is started on this machine like the tests start one (``tests/support/postgres.py``),
but with ``fsync`` on, as a production server runs, and synchronous commit (forklog's own setting): both backends
acknowledge only what is on disk. Or ``FORKLOG_TEST_DATABASE_URL`` names a server to use instead.

- *1-event appends* and *100-event batches*: the same load (bench/load.py, wrk when installed) against forklog on
  PostgreSQL and forklog on files, interleaved run by run. **Target: PostgreSQL >= 0.5x files** for 1-event appends.
- *fork*: ``POST /sessions/{id}/fork`` of sessions of BENCH_PG_FORK_SIZES events (default 1k, 100k, 1M), loaded into
  the database with ``python -m app copy`` from files bench/gen.py writes. **Target: 1M / 1k <= 2** (a fork inserts
  a reference to the source's prefix, no rows).
- *cold replica's first append*: a new forklog process on the database (nothing cached) appends one event to the
  largest session; timed from the request to the 201, after the replica is ready. **Target: < 1 s.**
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench import gen
from bench.appends import PREFIX, _open_step_seed, append_body
from bench.load import LoadResult, run_load
from bench.report import Row, skipped
from bench.util import (
    Client,
    Server,
    env_float,
    env_int,
    forklog_argv,
    free_port,
    human_bytes,
    human_count,
    log,
    median,
    running,
    spawn,
    start_forklog,
)
from tests.support.postgres import ENV_URL, ExternalPostgres, PostgresCluster, PostgresError, fresh_database_name

__all__ = ["run"]

DEFAULT_SIZES = "1000,100000,1000000"
SECTION = "PostgreSQL"


def fork_sizes() -> list[int]:
    raw = os.environ.get("BENCH_PG_FORK_SIZES", DEFAULT_SIZES)
    return [int(part.replace("_", "")) for part in raw.split(",") if part.strip()]


def start_on_database(url: str, log_path: Path) -> Server:
    port = free_port()
    return spawn([*forklog_argv(port, log_path.parent / "unused"), "--database-url", url], log_path, port)


def run(work: Path) -> list[Row]:
    external = os.environ.get(ENV_URL)
    try:
        server = ExternalPostgres(external) if external else PostgresCluster(fsync=True, settings=BENCH_SETTINGS)
        if isinstance(server, PostgresCluster):
            server.start()
    except PostgresError as exc:
        log(f"postgres: no server ({exc})")
        return [skipped(SECTION, "every row", "no PostgreSQL server binaries, and no " + ENV_URL)]
    try:
        name = server.create_database(fresh_database_name("forklog_bench"))
        url = server.url(name)
        log(f"postgres: {'external server' if external else 'a throwaway cluster (fsync on)'}, database {name}")
        rows = appends(work, url)
        rows += forks(work, url)
        server.drop_database(name)
        return rows
    finally:
        server.close()


BENCH_SETTINGS = {"shared_buffers": "512MB", "max_wal_size": "4GB", "checkpoint_timeout": "30min"}


def _seed_sessions(server: Server, clients: int) -> None:
    client = Client(server.port)
    for i in range(clients):
        client.expect(201, "POST", "/sessions", {"id": f"{PREFIX}{i}", "seed": _open_step_seed()})
    client.close()


def appends(work: Path, url: str) -> list[Row]:
    clients = env_int("BENCH_CLIENTS", 32)
    seconds = env_float("BENCH_APPEND_SECONDS", 5.0)
    runs = env_int("BENCH_APPEND_RUNS", 3)
    batch = 100
    on_files = start_forklog(work / "pg-files-data", work / "logs" / "pg-files.log")
    on_postgres = start_on_database(url, work / "logs" / "pg-postgres.log")
    one, hundred = append_body(1), append_body(batch)
    files_1: list[LoadResult] = []
    pg_1: list[LoadResult] = []
    files_100: list[LoadResult] = []
    pg_100: list[LoadResult] = []
    with running(on_files), running(on_postgres):
        for server in (on_files, on_postgres):
            server.wait_ready()
            _seed_sessions(server, clients)
            run_load(server.port, PREFIX, one, clients=clients, seconds=1)  # warm-up
        for r in range(runs):
            pg_1.append(run_load(on_postgres.port, PREFIX, one, clients=clients, seconds=seconds))
            files_1.append(run_load(on_files.port, PREFIX, one, clients=clients, seconds=seconds))
            pg_100.append(run_load(on_postgres.port, PREFIX, hundred, clients=clients, seconds=seconds))
            files_100.append(run_load(on_files.port, PREFIX, hundred, clients=clients, seconds=seconds))
            log(
                f"postgres appends {r + 1}/{runs}: 1 event {pg_1[-1].rps:,.0f} req/s (files {files_1[-1].rps:,.0f}); "
                f"100 events {pg_100[-1].rps * batch:,.0f} ev/s (files {files_100[-1].rps * batch:,.0f})"
            )
    errors = sum(result.errors for result in (*pg_1, *pg_100))
    pg_rps, files_rps = median([r.rps for r in pg_1]), median([r.rps for r in files_1])
    pg_ev, files_ev = median([r.rps * batch for r in pg_100]), median([r.rps * batch for r in files_100])
    pg_p50, pg_p99 = median([r.p50_ms for r in pg_1]), median([r.p99_ms for r in pg_1])
    note = f"{clients} clients, both durable; PostgreSQL p50 {pg_p50:.1f} / p99 {pg_p99:.1f} ms"
    if errors:
        note += f"; {errors} error answers (see logs)"
    return [
        Row(
            SECTION,
            "1-event append: throughput",
            f"{pg_rps:,.0f} req/s",
            "file backend",
            f"{files_rps:,.0f} req/s",
            pg_rps / files_rps,
            ">= 0.5x",
            pg_rps / files_rps >= 0.5,
            note,
        ),
        Row(
            SECTION,
            f"{batch}-event batches: events/s",
            f"{pg_ev:,.0f} ev/s",
            "file backend",
            f"{files_ev:,.0f} ev/s",
            pg_ev / files_ev,
            note=f"{clients} clients",
        ),
    ]


def load_sessions(work: Path, url: str, sizes: list[int]) -> dict[int, str]:
    """Sessions of ``sizes`` events, written as files and copied into the database with ``python -m app copy``."""
    data = work / "pg-fork-data"
    ids: dict[int, str] = {}
    for i, n in enumerate(sizes):
        ids[n] = f"bench-pg-fork-{human_count(n).lower()}"
        size = gen.write_session(data / "sessions", ids[n], n, created_at=1_700_000_000_000 + i)
        log(f"postgres: wrote {human_count(n)} events ({human_bytes(size)})")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "app", "copy", "--from", str(data), "--to", url], check=True)
    log(f"postgres: copied them into the database in {time.perf_counter() - started:.1f} s")
    return ids


def forks(work: Path, url: str) -> list[Row]:
    sizes = fork_sizes()
    if not sizes:
        return []
    runs = env_int("BENCH_RUNS", 5)
    ids = load_sessions(work, url, sizes)
    rows: list[Row] = []
    times: dict[int, float] = {}
    server = start_on_database(url, work / "logs" / "pg-fork.log")
    with running(server):
        server.wait_ready()
        client = Client(server.port)
        for n, sid in ids.items():
            client.expect(201, "POST", f"/sessions/{sid}/fork", {"sessionId": f"{sid}-warmup"})
            client.expect(204, "DELETE", f"/sessions/{sid}-warmup")
            taken = []
            for r in range(runs):
                started = time.perf_counter()
                client.expect(201, "POST", f"/sessions/{sid}/fork", {"sessionId": f"{sid}-child-{r}"})
                taken.append(time.perf_counter() - started)
                client.expect(204, "DELETE", f"/sessions/{sid}-child-{r}")
            times[n] = median(taken)
            log(f"postgres: fork of {human_count(n)} events: {times[n] * 1e3:.2f} ms")
        client.close()
    smallest, largest = min(times), max(times)
    for n, fork_s in times.items():
        rows.append(
            Row(
                SECTION,
                f"fork of {human_count(n)} events",
                f"{fork_s * 1e3:.2f} ms",
                f"fork of {human_count(smallest)}",
                f"{times[smallest] * 1e3:.2f} ms",
                fork_s / times[smallest],
                "<= 2x" if n == largest and n != smallest else "",
                fork_s <= 2 * times[smallest] if n == largest and n != smallest else None,
                f"median of {runs}, one HTTP request each",
            )
        )
    rows.append(cold_append(work, url, ids[largest], largest))
    return rows


def cold_append(work: Path, url: str, sid: str, n: int) -> Row:
    """A new replica's first append to the largest session (its cache is cold), a few times over."""
    runs = env_int("BENCH_RUNS_1M", 3)
    taken = []
    for r in range(runs):
        replica = start_on_database(url, work / "logs" / f"pg-cold-{r}.log")
        with running(replica):
            replica.wait_ready()
            client = Client(replica.port)
            started = time.perf_counter()
            client.expect(201, "POST", f"/sessions/{sid}/events", {"events": [{"type": "bench/note", "data": r}]})
            taken.append(time.perf_counter() - started)
            client.close()
        log(f"postgres: cold replica's first append to {human_count(n)} events: {taken[-1] * 1e3:.1f} ms")
    cold = median(taken)
    return Row(
        SECTION,
        f"cold replica's first append to {human_count(n)} events",
        f"{cold * 1e3:.1f} ms",
        "fixed target",
        "1000 ms",
        cold,
        "< 1 s",
        cold < 1.0,
        f"median of {runs} new processes",
    )
