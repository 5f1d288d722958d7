"""What metrics cost appends (spec 13: at most 3%): one-event appends by 32 clients on distinct sessions, against
two forklog processes that differ only in ``--no-metrics``, fsync on as served; then the same with fsync off, where
the CPU the metrics take is the largest share of an append's. The runs of the two processes are interleaved.
"""

from __future__ import annotations

from pathlib import Path

from bench.appends import PREFIX, _open_step_seed, append_body
from bench.load import LoadResult, run_load
from bench.report import Row
from bench.util import Client, env_float, env_int, log, median, running, start_forklog


def _prepare(port: int, clients: int) -> None:
    client = Client(port)
    for i in range(clients):
        client.expect(201, "POST", "/sessions", {"id": f"{PREFIX}{i}", "seed": _open_step_seed()})
    client.close()


def _compare(work: Path, clients: int, seconds: float, runs: int, *, fsync: bool) -> tuple[float, float]:
    """The median throughputs (req/s) with metrics on and off."""
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
        for r in range(runs):
            # Alternate which goes first: a slow moment of the machine hits both alike.
            order = (("on", on), ("off", off)) if r % 2 == 0 else (("off", off), ("on", on))
            for name, server in order:
                measured[name].append(run_load(server.port, PREFIX, one, clients=clients, seconds=seconds))
            log(
                f"metrics ({'fsync' if fsync else 'no fsync'}) run {r + 1}/{runs}: on {measured['on'][-1].rps:,.0f} "
                f"req/s, off {measured['off'][-1].rps:,.0f} req/s"
            )
    return median([r.rps for r in measured["on"]]), median([r.rps for r in measured["off"]])


def run(work: Path) -> list[Row]:
    clients = env_int("BENCH_CLIENTS", 32)
    seconds = env_float("BENCH_APPEND_SECONDS", 5.0)
    runs = env_int("BENCH_APPEND_RUNS", 3) * 2 - 1  # an odd number: a median of its own
    log(f"metrics: {clients} clients, {runs} runs of {seconds:.0f} s each, metrics on and off")
    synced_on, synced_off = _compare(work, clients, seconds, runs, fsync=True)
    cpu_on, cpu_off = _compare(work, clients, seconds, runs, fsync=False)
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
    ]
