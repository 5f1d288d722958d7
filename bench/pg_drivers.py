"""PostgreSQL drivers side by side on forklog's kind of work: psycopg 3 (+ psycopg_pool, async) and asyncpg.

``.venv/bin/python -m bench.pg_drivers [--seconds 3 --rounds 3 ...]``: a script that prints figures, not a test.
It runs against a throwaway cluster (``tests/support/postgres.py``), or the server of ``FORKLOG_TEST_DATABASE_URL``.
Each driver has one pool of ``--pool`` connections shared by ``--clients`` asyncio clients; a run lasts
``--seconds`` after a short warm-up; the runs of all variants are interleaved, ``--rounds`` times, and each figure is
the median over the rounds (a slow moment of the machine hits every variant alike).

Scenarios:

- ``append1``: one transaction: ``UPDATE heads SET count = count + 1 WHERE id = $1 AND count = $2`` (no row: a
  conflict) + ``INSERT INTO events`` of one ~200-byte text body, committed with synchronous_commit on.
- ``batch100``: the same with 100 events per transaction, through each bulk path (executemany, COPY, unnest arrays).
- ``read1000``: 1000 consecutive events of one log by a (log, seq) range.

How each is done: ``tx`` is BEGIN / UPDATE / INSERT / COMMIT, one round trip each; ``pipeline`` is psycopg's pipeline
mode (BEGIN+UPDATE+INSERT in one round trip, COMMIT after the update's row count is checked); ``cte`` is one statement
in autocommit, ``WITH h AS (UPDATE ... RETURNING id) INSERT ... SELECT ... FROM h``. asyncpg's pool runs a reset query
(a round trip) on every release by default; ``noreset`` passes a no-op ``reset`` (what psycopg_pool does by default).
psycopg sends its array parameters in binary (``%b``); ``unnest (text params)`` shows what the text form costs.
The append scenarios run on a cluster with fsync off (the test cluster) and on one with fsync on.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import asyncpg
import psycopg
from psycopg_pool import AsyncConnectionPool

from tests.support.postgres import ENV_URL, ExternalPostgres, PostgresCluster, PostgresServer

BODY = '{"type":"assistant/text","data":{"text":"' + "lorem ipsum " * 12
BODY = (BODY + "x" * 200)[:197] + '"}}'
READ_LOG = 0
READ_LOG_ROWS = 50_000
READ_SPAN = 1000
BATCH = 100

SCHEMA = """
CREATE TABLE heads (id bigint PRIMARY KEY, count bigint NOT NULL);
CREATE TABLE events (log bigint NOT NULL, seq bigint NOT NULL, body text NOT NULL, PRIMARY KEY (log, seq));
"""

# asyncpg numbers its parameters; psycopg takes %s. The statements are otherwise the same.
UPDATE = "UPDATE heads SET count = count + $3 WHERE id = $1 AND count = $2"
INSERT = "INSERT INTO events (log, seq, body) VALUES ($1, $2, $3)"
UNNEST = "INSERT INTO events (log, seq, body) SELECT $1, s, b FROM unnest($2::bigint[], $3::text[]) AS t(s, b)"
CTE1 = (
    "WITH h AS (UPDATE heads SET count = count + 1 WHERE id = $1 AND count = $2 RETURNING id) "
    "INSERT INTO events (log, seq, body) SELECT id, $2, $3 FROM h"
)
CTE_UNNEST = (
    "WITH h AS (UPDATE heads SET count = count + $3 WHERE id = $1 AND count = $2 RETURNING id) "
    "INSERT INTO events (log, seq, body) SELECT h.id, s, b FROM h, unnest($4::bigint[], $5::text[]) AS t(s, b)"
)
READ = "SELECT seq, body FROM events WHERE log = $1 AND seq >= $2 AND seq < $3 ORDER BY seq"
COPY = "COPY events (log, seq, body) FROM STDIN"


def to_psycopg(query: str, *, binary: bool = False) -> str:
    """The same statement with psycopg's placeholders: $n becomes %(pn)s (%(pn)b: sent in binary), see ``params()``."""
    # Named, since a statement may use one parameter twice (CTE1 uses $2 for the check and the seq).
    return re.sub(r"\$(\d+)", r"%(p\1)b" if binary else r"%(p\1)s", query)


class Conflict(Exception):
    """The head moved: the optimistic UPDATE matched no row. Never expected here (each client owns its log)."""


@dataclass
class Client:
    log: int
    rng: random.Random
    count: int = 0

    def batch(self, n: int) -> tuple[list[int], list[str]]:
        return list(range(self.count, self.count + n)), [BODY] * n


Operation = Callable[[Client], Awaitable[None]]


@dataclass(frozen=True)
class Variant:
    scenario: str
    driver: str
    how: str
    op: Operation
    rows: int


@dataclass
class Round:
    ops_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_us_per_op: float


@dataclass
class Figures:
    variant: Variant
    rounds: list[Round] = field(default_factory=list)

    def median(self, name: str) -> float:
        return float(statistics.median(getattr(r, name) for r in self.rounds))


def params(*values: object) -> dict[str, object]:
    return {f"p{i}": v for i, v in enumerate(values, start=1)}


def asyncpg_variants(pool: asyncpg.Pool, driver: str, *, all_paths: bool) -> list[Variant]:
    async def tx1(c: Client) -> None:
        async with pool.acquire() as conn, conn.transaction():
            if await conn.execute(UPDATE, c.log, c.count, 1) != "UPDATE 1":
                raise Conflict
            await conn.execute(INSERT, c.log, c.count, BODY)
        c.count += 1

    async def cte1(c: Client) -> None:
        async with pool.acquire() as conn:
            if await conn.execute(CTE1, c.log, c.count, BODY) != "INSERT 0 1":
                raise Conflict
        c.count += 1

    def batch(how: str) -> Operation:
        async def op(c: Client) -> None:
            seqs, bodies = c.batch(BATCH)
            async with pool.acquire() as conn:
                if how == "cte+unnest":
                    if await conn.execute(CTE_UNNEST, c.log, c.count, BATCH, seqs, bodies) != f"INSERT 0 {BATCH}":
                        raise Conflict
                else:
                    async with conn.transaction():
                        if await conn.execute(UPDATE, c.log, c.count, BATCH) != "UPDATE 1":
                            raise Conflict
                        if how == "executemany":
                            await conn.executemany(INSERT, [(c.log, s, b) for s, b in zip(seqs, bodies, strict=True)])
                        elif how == "copy":
                            records = [(c.log, s, b) for s, b in zip(seqs, bodies, strict=True)]
                            await conn.copy_records_to_table("events", records=records, columns=("log", "seq", "body"))
                        else:
                            await conn.execute(UNNEST, c.log, seqs, bodies)
            c.count += BATCH

        return op

    async def read(c: Client) -> None:
        start = c.rng.randrange(READ_LOG_ROWS - READ_SPAN)
        async with pool.acquire() as conn:
            rows = await conn.fetch(READ, READ_LOG, start, start + READ_SPAN)
        assert len(rows) == READ_SPAN

    variants = [Variant("append1", driver, "tx", tx1, 1), Variant("read1000", driver, "fetch", read, READ_SPAN)]
    if all_paths:
        variants.append(Variant("append1", driver, "cte", cte1, 1))
        variants += [
            Variant("batch100", driver, how, batch(how), BATCH)
            for how in ("executemany", "copy", "unnest", "cte+unnest")
        ]
    return variants


def psycopg_variants(pool: AsyncConnectionPool[psycopg.AsyncConnection]) -> list[Variant]:
    update, insert, cte1_sql, read_sql = map(to_psycopg, (UPDATE, INSERT, CTE1, READ))
    # Arrays go in binary: the text form of a text[] quotes and escapes each element in Python (a regex per element),
    # which costs ~30 us per JSON body; the binary form copies them.
    unnest, cte_unnest = to_psycopg(UNNEST, binary=True), to_psycopg(CTE_UNNEST, binary=True)
    unnest_text = to_psycopg(UNNEST)

    async def tx1(c: Client) -> None:
        async with pool.connection() as conn, conn.transaction():
            if (await conn.execute(update, params(c.log, c.count, 1))).rowcount != 1:
                raise Conflict
            await conn.execute(insert, params(c.log, c.count, BODY))
        c.count += 1

    async def pipeline1(c: Client) -> None:
        async with pool.connection() as conn, conn.pipeline() as pipe, conn.transaction():
            cur = await conn.execute(update, params(c.log, c.count, 1))
            await conn.execute(insert, params(c.log, c.count, BODY))
            # The row count is known once the queued statements come back; a conflict rolls back, not commits.
            await pipe.sync()
            if cur.rowcount != 1:
                raise Conflict
        c.count += 1

    async def cte1(c: Client) -> None:
        async with pool.connection() as conn:
            if (await conn.execute(cte1_sql, params(c.log, c.count, BODY))).rowcount != 1:
                raise Conflict
        c.count += 1

    def batch(how: str) -> Operation:
        async def op(c: Client) -> None:
            seqs, bodies = c.batch(BATCH)
            async with pool.connection() as conn:
                if how == "cte+unnest":
                    cur = await conn.execute(cte_unnest, params(c.log, c.count, BATCH, seqs, bodies))
                    if cur.rowcount != BATCH:
                        raise Conflict
                elif how == "pipeline+unnest":
                    async with conn.pipeline() as pipe, conn.transaction():
                        cur = await conn.execute(update, params(c.log, c.count, BATCH))
                        await conn.execute(unnest, params(c.log, seqs, bodies))
                        await pipe.sync()
                        if cur.rowcount != 1:
                            raise Conflict
                else:
                    async with conn.transaction(), conn.cursor() as cur:
                        await cur.execute(update, params(c.log, c.count, BATCH))
                        if cur.rowcount != 1:
                            raise Conflict
                        if how == "executemany":
                            rows = [params(c.log, s, b) for s, b in zip(seqs, bodies, strict=True)]
                            await cur.executemany(insert, rows)
                        elif how == "copy":
                            async with cur.copy(COPY) as copy:
                                for s, b in zip(seqs, bodies, strict=True):
                                    await copy.write_row((c.log, s, b))
                        else:
                            query = unnest_text if how == "unnest (text params)" else unnest
                            await cur.execute(query, params(c.log, seqs, bodies))
            c.count += BATCH

        return op

    def read(binary: bool) -> Operation:
        async def op(c: Client) -> None:
            start = c.rng.randrange(READ_LOG_ROWS - READ_SPAN)
            async with pool.connection() as conn:
                cur = await conn.execute(read_sql, params(READ_LOG, start, start + READ_SPAN), binary=binary)
                rows = await cur.fetchall()
            assert len(rows) == READ_SPAN

        return op

    return [
        Variant("append1", "psycopg", "tx", tx1, 1),
        Variant("append1", "psycopg", "pipeline", pipeline1, 1),
        Variant("append1", "psycopg", "cte", cte1, 1),
        *(
            Variant("batch100", "psycopg", how, batch(how), BATCH)
            for how in ("executemany", "copy", "unnest", "unnest (text params)", "pipeline+unnest", "cte+unnest")
        ),
        Variant("read1000", "psycopg", "fetchall", read(False), READ_SPAN),
        Variant("read1000", "psycopg", "fetchall binary", read(True), READ_SPAN),
    ]


class Bench:
    """The pools of one server and the runs of the variants on it."""

    def __init__(self, url: str, args: argparse.Namespace) -> None:
        self.url = url
        self.args = args
        self._next_log = 1

    async def __aenter__(self) -> Bench:
        setup = await asyncpg.connect(self.url)
        try:
            await setup.execute("DROP TABLE IF EXISTS heads, events")
            await setup.execute(SCHEMA)
            await setup.copy_records_to_table(
                "events", records=[(READ_LOG, s, BODY) for s in range(READ_LOG_ROWS)], columns=("log", "seq", "body")
            )
            await setup.execute("VACUUM ANALYZE events")
            self.settings = {
                name: await setup.fetchval(f"SHOW {name}")
                for name in ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "shared_buffers")
            }
        finally:
            await setup.close()

        async def no_reset(_conn: asyncpg.Connection) -> None:
            return None

        size = self.args.pool
        self.asyncpg_default = await asyncpg.create_pool(self.url, min_size=size, max_size=size)
        self.asyncpg_noreset = await asyncpg.create_pool(self.url, min_size=size, max_size=size, reset=no_reset)
        # autocommit: reads and single statements need no BEGIN, and a returned connection is idle, so the pool has
        # nothing to roll back; conn.transaction() still brackets the multi-statement cases.
        self.psycopg_pool: AsyncConnectionPool[psycopg.AsyncConnection] = AsyncConnectionPool(
            self.url, min_size=size, max_size=size, kwargs={"autocommit": True}, open=False
        )
        await self.psycopg_pool.open(wait=True)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.asyncpg_default.close()
        await self.asyncpg_noreset.close()
        await self.psycopg_pool.close()

    def variants(self, scenarios: Iterable[str]) -> list[Variant]:
        every = [
            *asyncpg_variants(self.asyncpg_default, "asyncpg", all_paths=False),
            *asyncpg_variants(self.asyncpg_noreset, "asyncpg noreset", all_paths=True),
            *psycopg_variants(self.psycopg_pool),
        ]
        wanted = set(scenarios)
        only = self.args.only
        return [v for v in every if v.scenario in wanted and (not only or only in f"{v.scenario} {v.driver} {v.how}")]

    async def run(self, variant: Variant, seconds: float) -> Round:
        clients = [Client(log=self._next_log + i, rng=random.Random(i)) for i in range(self.args.clients)]
        self._next_log += len(clients)
        async with self.psycopg_pool.connection() as conn:
            await conn.execute("INSERT INTO heads SELECT g, 0 FROM generate_series(%s::bigint, %s::bigint) AS g",
                               (clients[0].log, clients[-1].log))  # fmt: skip
            await conn.execute("VACUUM heads")
        latencies: list[float] = []

        async def loop(client: Client, until: float, record: bool) -> None:
            while (started := time.perf_counter()) < until:
                await variant.op(client)
                if record:
                    latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(loop(c, time.perf_counter() + self.args.warmup, False) for c in clients))
        cpu0, began = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        await asyncio.gather(*(loop(c, began + seconds, True) for c in clients))
        elapsed = time.perf_counter() - began
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        latencies.sort()
        return Round(
            ops_per_s=len(latencies) / elapsed,
            p50_ms=latencies[len(latencies) // 2] * 1000,
            p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            cpu_us_per_op=cpu / len(latencies) * 1e6,
        )

    async def measure(self, scenarios: Iterable[str]) -> list[Figures]:
        figures = [Figures(v) for v in self.variants(scenarios)]
        for round_number in range(1, self.args.rounds + 1):
            # A new order each round, so that no variant always runs right after the same neighbour.
            order = random.Random(round_number).sample(figures, len(figures))
            for fig in order:
                fig.rounds.append(await self.run(fig.variant, self.args.seconds))
                log(f"round {round_number} {fig.variant.scenario} {fig.variant.driver} {fig.variant.how}: "
                    f"{fig.rounds[-1].ops_per_s:,.0f}/s")  # fmt: skip
        return figures


def log(message: str) -> None:
    print(f"[pg_drivers] {message}", file=sys.stderr, flush=True)


def render(title: str, settings: dict[str, str], figures: list[Figures]) -> str:
    lines = [
        f"## {title}",
        "server: " + ", ".join(f"{k}={v}" for k, v in settings.items()),
        "",
        "| scenario | driver | how | tx/s | rows/s | p50 ms | p99 ms | client CPU µs/tx |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for fig in sorted(figures, key=lambda f: (f.variant.scenario, -f.median("ops_per_s"))):
        v = fig.variant
        ops = fig.median("ops_per_s")
        lines.append(
            f"| {v.scenario} | {v.driver} | {v.how} | {ops:,.0f} | {ops * v.rows:,.0f} | {fig.median('p50_ms'):.2f} "
            f"| {fig.median('p99_ms'):.2f} | {fig.median('cpu_us_per_op'):,.0f} |"
        )
    return "\n".join(lines)


async def bench_server(title: str, server: PostgresServer, args: argparse.Namespace, scenarios: list[str]) -> str:
    name = "forklog_pg_drivers"
    server.drop_database(name)
    server.create_database(name)
    try:
        async with Bench(server.url(name), args) as bench:
            figures = await bench.measure(scenarios)
            return render(title, bench.settings, figures)
    finally:
        server.drop_database(name)


def header(args: argparse.Namespace) -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"drivers: psycopg {version('psycopg')} (libpq {psycopg.pq.version()}, {psycopg.pq.__impl__}), "
        f"psycopg_pool {version('psycopg-pool')}, asyncpg {version('asyncpg')}; Python {sys.version.split()[0]}\n"
        f"load: {args.clients} asyncio clients in one process, pool {args.pool} per driver, {args.rounds} rounds x "
        f"{args.seconds:g} s (+{args.warmup:g} s warm-up), medians; {os.cpu_count()} cores; loadavg {load}"
    )


async def main_async(args: argparse.Namespace) -> None:
    all_scenarios = ["append1", "batch100", "read1000"]
    print(header(args), flush=True)
    external = os.environ.get(ENV_URL)
    if external:
        print(await bench_server(f"server of {ENV_URL}", ExternalPostgres(external), args, all_scenarios))
        return
    with PostgresCluster() as cluster:
        cluster.start()
        log(f"cluster (fsync off) started in {cluster.last_start_seconds:.2f} s")
        print(await bench_server("test cluster, fsync off", cluster, args, all_scenarios), flush=True)
    if args.fsync_on:
        with PostgresCluster(fsync=True) as cluster:
            cluster.start()
            print(f"\nfdatasync of the cluster's file system: {fdatasync_ms(cluster.socket_dir)}", flush=True)
            print(await bench_server("cluster with fsync on", cluster, args, ["append1", "batch100"]))
    print(f"\nloadavg at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def fdatasync_ms(folder: Path, samples: int = 200) -> str:
    path = folder / "fdatasync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    timings = []
    try:
        for _ in range(samples):
            os.write(fd, b"x" * 8191 + b"\n")
            started = time.perf_counter()
            os.fdatasync(fd)
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    timings.sort()
    return f"median {statistics.median(timings):.3f} ms, p90 {timings[int(0.9 * samples)]:.3f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--pool", type=int, default=10)
    parser.add_argument("--only", default="", help="run the variants whose 'scenario driver how' contains this")
    parser.add_argument("--no-fsync-on", dest="fsync_on", action="store_false", help="skip the fsync=on cluster")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
