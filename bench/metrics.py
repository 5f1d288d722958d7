"""What metrics cost appends (spec 13: at most 3%): one-event appends by 32 clients on distinct sessions, against
two forklog processes that differ only in ``--no-metrics``, fsync on as served; then the same with fsync off, where
the CPU the metrics take is the largest share of an append's. The runs of the two processes are interleaved.

Besides throughput each run measures the server's CPU time per append (user + system, all its threads, from
/proc): on a machine shared with other work, throughput swings with what the others do, while the CPU an append
costs the server barely moves, so the CPU ratio is the steadier measure of what metrics add.
"""

from __future__ import annotations

from pathlib import Path

from bench.appends import PREFIX, _open_step_seed, append_body
from bench.load import LoadResult, run_load
from bench.report import Row
from bench.util import Client, cpu_seconds, env_float, env_int, log, median, running, start_forklog


def _prepare(port: int, clients: int) -> None:
    client = Client(port)
    for i in range(clients):
        client.expect(201, "POST", "/sessions", {"id": f"{PREFIX}{i}", "seed": _open_step_seed()})
    client.close()


def _compare(work: Path, clients: int, seconds: float, runs: int, *, fsync: bool) -> tuple[float, float, float, float]:
    """The median throughputs (req/s) with metrics on and off, and the median server CPU per append (µs)."""
    kind = "sync" if fsync else "nosync"
    on = start_forklog(work / f"metrics-on-{kind}", work / "logs" / f"metrics-on-{kind}.log", fsync=fsync)
    off = start_forklog(
        work / f"metrics-off-{kind}", work / "logs" / f"metrics-off-{kind}.log", fsync=fsync, extra=("--no-metrics",)
    )
    one = append_body(1)
    with running(on), running(off):
        for server in (on, off):
            server.wait_ready()
            _prepare(server.port, clients)
            run_load(server.port, PREFIX, one, clients=clients, seconds=1)  # warm up
        measured: dict[str, list[LoadResult]] = {"on": [], "off": []}
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        for r in range(runs):
            # Alternate which goes first: a slow moment of the machine hits both alike.
            order = (("on", on), ("off", off)) if r % 2 == 0 else (("off", off), ("on", on))
            for name, server in order:
                before = cpu_seconds(server.pid)
                result = run_load(server.port, PREFIX, one, clients=clients, seconds=seconds)
                measured[name].append(result)
                cpu[name].append((cpu_seconds(server.pid) - before) / max(result.requests, 1) * 1e6)
            log(
                f"metrics ({'fsync' if fsync else 'no fsync'}) run {r + 1}/{runs}: on {measured['on'][-1].rps:,.0f} "
                f"req/s {cpu['on'][-1]:.0f} µs CPU/append, off {measured['off'][-1].rps:,.0f} req/s "
                f"{cpu['off'][-1]:.0f} µs CPU/append"
            )
    return (
        median([r.rps for r in measured["on"]]),
        median([r.rps for r in measured["off"]]),
        median(cpu["on"]),
        median(cpu["off"]),
    )


def run(work: Path) -> list[Row]:
    clients = env_int("BENCH_CLIENTS", 32)
    seconds = env_float("BENCH_APPEND_SECONDS", 5.0)
    runs = env_int("BENCH_APPEND_RUNS", 3) * 2 - 1  # an odd number: a median of its own
    log(f"metrics: {clients} clients, {runs} runs of {seconds:.0f} s each, metrics on and off")
    synced_on, synced_off, synced_cpu_on, synced_cpu_off = _compare(work, clients, seconds, runs, fsync=True)
    cpu_on, cpu_off, nosync_cpu_on, nosync_cpu_off = _compare(work, clients, seconds, runs, fsync=False)
    return [
        Row(
            "Metrics",
            "1-event append, metrics on",
            f"{synced_on:,.0f} req/s",
            "metrics off (--no-metrics)",
            f"{synced_off:,.0f} req/s",
            synced_on / synced_off,
            ">= 0.97x",
            synced_on / synced_off >= 0.97,
            f"{clients} clients, fsync on",
        ),
        Row(
            "Metrics",
            "1-event append, metrics on, fsync off",
            f"{cpu_on:,.0f} req/s",
            "metrics off, fsync off",
            f"{cpu_off:,.0f} req/s",
            cpu_on / cpu_off,
            note="informative: the CPU ceiling, where the metrics' share is largest",
        ),
        Row(
            "Metrics",
            "server CPU per append, metrics off / on",
            f"{synced_cpu_on:.0f} µs",
            "metrics off",
            f"{synced_cpu_off:.0f} µs",
            synced_cpu_off / synced_cpu_on,
            ">= 0.97x",
            synced_cpu_off / synced_cpu_on >= 0.97,
            f"fsync on; fsync off: {nosync_cpu_on:.0f} µs on, {nosync_cpu_off:.0f} µs off; the throughput a core "
            "allows, on / off",
        ),
    ]
