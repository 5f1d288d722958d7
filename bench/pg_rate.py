"""Durable one-event appends on PostgreSQL vs the server's own commit rate (BENCH_ONLY=pgrate; spec 6, Throughput).

One forklog process on a throwaway cluster (fsync on, synchronous commit: forklog's setting) takes BENCH_CLIENTS
(32) closed-loop clients, each appending one open-turn event to its own session and waiting for its 201
(bench/load.py). The baseline is ``pgbench`` on the same server with the same client count, running a one-row INSERT
transaction (``-M prepared -n``), interleaved run by run. **Target: forklog >= 0.5x pgbench.**
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from bench.appends import PREFIX, append_body
from bench.load import LoadResult, run_load
from bench.postgres import BENCH_SETTINGS, _seed_sessions, start_on_database
from bench.report import Row, skipped
from bench.util import cpu_seconds, env_float, env_int, log, median, running
from tests.support.postgres import ENV_URL, ExternalPostgres, PostgresCluster, PostgresError, fresh_database_name

__all__ = ["PGBENCH_SCRIPT", "pgbench_tps", "run"]

SECTION = "PostgreSQL throughput"
PGBENCH_SCRIPT = "INSERT INTO bench_rows (a, b) VALUES (:id, repeat('x', 150));\n"


def server_cpu(server: object) -> float:
    """CPU seconds (user + system) of a throwaway cluster's processes so far, those that exited included (the
    postmaster's children's times); 0 for a server not ours."""
    if not isinstance(server, PostgresCluster):
        return 0.0
    postmaster = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    total = sum(int(field) for field in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == postmaster:
                total += cpu_seconds(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue  # a backend that exited meanwhile
    return total


def children_cpu() -> float:
    """CPU seconds of this process's children that exited and were waited for (a finished load generator's)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pgbench_tps(url: str, script: Path, *, clients: int, seconds: int) -> float:
    """Transactions per second of ``pgbench`` running ``script`` (each client its own ``:id``)."""
    parts = urlsplit(url)
    argv = [
        "pgbench", "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-T", str(seconds), "-f", str(script),
        "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432), "-U", parts.username or "postgres",
        parts.path.lstrip("/"),
    ]  # fmt: skip
    env = {**os.environ, "PGPASSWORD": parts.password or ""}
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env).stdout
    found = re.search(r"tps = ([0-9.]+)", out)
    if found is None:
        raise RuntimeError(f"pgbench printed no tps:\n{out}")
    return float(found.group(1))


def run(work: Path) -> list[Row]:
    if shutil.which("pgbench") is None:
        return [skipped(SECTION, "every row", "no pgbench on PATH (apt-get install postgresql-client)")]
    external = os.environ.get(ENV_URL)
    try:
        server = ExternalPostgres(external) if external else PostgresCluster(fsync=True, settings=BENCH_SETTINGS)
        if isinstance(server, PostgresCluster):
            server.start()
    except PostgresError as exc:
        log(f"pgrate: no server ({exc})")
        return [skipped(SECTION, "every row", "no PostgreSQL server binaries, and no " + ENV_URL)]
    try:
        name = server.create_database(fresh_database_name("forklog_rate"))
        baseline = server.create_database(fresh_database_name("forklog_pgbench"))
        rows = compare(work, server, server.url(name), server.url(baseline))
        server.drop_database(name)
        server.drop_database(baseline)
        return rows
    finally:
        server.close()


def compare(work: Path, server: object, url: str, baseline_url: str) -> list[Row]:
    clients = env_int("BENCH_CLIENTS", 32)
    seconds = env_float("BENCH_APPEND_SECONDS", 10.0)
    runs = env_int("BENCH_APPEND_RUNS", 3)
    script = work / "pgbench-insert.sql"
    script.write_text(PGBENCH_SCRIPT)
    subprocess.run(
        ["psql", "-q", "-v", "ON_ERROR_STOP=1", baseline_url, "-c", "CREATE TABLE bench_rows (a int, b text)"],
        check=True,
    )
    forklog = start_on_database(url, work / "logs" / "pgrate.log")
    one = append_body(1)
    mine: list[LoadResult] = []
    theirs: list[float] = []
    # CPU per append (forklog's process, the server's backends) and per pgbench transaction (the server's).
    cpu: dict[str, list[float]] = {"forklog": [], "server": [], "loadgen": [], "pgbench": []}
    with running(forklog):
        forklog.wait_ready()
        _seed_sessions(forklog, clients)
        run_load(forklog.port, PREFIX, one, clients=clients, seconds=1)  # warm-up
        for r in range(runs):
            own, served, driven = cpu_seconds(forklog.pid), server_cpu(server), children_cpu()
            mine.append(run_load(forklog.port, PREFIX, one, clients=clients, seconds=seconds))
            done = max(mine[-1].requests, 1)
            cpu["loadgen"].append((children_cpu() - driven) / done * 1e6)
            cpu["forklog"].append((cpu_seconds(forklog.pid) - own) / done * 1e6)
            cpu["server"].append((server_cpu(server) - served) / done * 1e6)
            served = server_cpu(server)
            theirs.append(pgbench_tps(baseline_url, script, clients=clients, seconds=max(1, round(seconds))))
            cpu["pgbench"].append((server_cpu(server) - served) / max(theirs[-1] * seconds, 1) * 1e6)
            log(
                f"pgrate {r + 1}/{runs}: forklog {mine[-1].rps:,.0f} appends/s (CPU a request: forklog "
                f"{cpu['forklog'][-1]:.0f} µs, PostgreSQL {cpu['server'][-1]:.0f} µs, load generator "
                f"{cpu['loadgen'][-1]:.0f} µs), pgbench {theirs[-1]:,.0f} tps "
                f"(PostgreSQL {cpu['pgbench'][-1]:.0f} µs a transaction)"
            )
    errors = sum(result.errors for result in mine)
    rate, tps = median([r.rps for r in mine]), median(theirs)
    note = (
        f"{clients} clients each side, fsync on, synchronous commit; forklog p50 "
        f"{median([r.p50_ms for r in mine]):.1f} / p99 {median([r.p99_ms for r in mine]):.1f} ms; "
        f"load generator {mine[0].tool}; CPU an append: forklog {median(cpu['forklog']):.0f} µs, PostgreSQL "
        f"{median(cpu['server']):.0f} µs, load generator {median(cpu['loadgen']):.0f} µs (a pgbench transaction: "
        f"PostgreSQL {median(cpu['pgbench']):.0f} µs)"
    )
    if errors:
        note += f"; {errors} error answers (see logs)"
    return [
        Row(
            SECTION,
            "durable 1-event appends vs pgbench INSERT",
            f"{rate:,.0f} appends/s",
            "pgbench, 1-row INSERT",
            f"{tps:,.0f} tps",
            rate / tps,
            ">= 0.5x",
            rate / tps >= 0.5,
            note,
        )
    ]
