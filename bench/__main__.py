"""``make bench`` (``python -m bench``): forklog beside its baselines, one table. See bench/README.md.

Settings (environment): BENCH_ONLY (fork,appends,restart,cold,stream,keys,limits,postgres,small,metrics,
sidebar,at-rest,pg_bytes,shares,standby), BENCH_SHARE_CLIENTS, BENCH_SHARE_SECONDS, BENCH_SHARE_RUNS,
BENCH_RUNS, BENCH_RUNS_1M,
BENCH_FORK_SIZES, BENCH_CLIENTS, BENCH_APPEND_SECONDS, BENCH_APPEND_RUNS, BENCH_RESTART_BYTES,
BENCH_RESTART_SESSION_EVENTS, BENCH_RESTART_RUNS, BENCH_COLD_BYTES, BENCH_PG_FORK_SIZES, BENCH_TAIL_APPENDS,
BENCH_SMALL_SESSIONS, BENCH_SIDEBAR_SESSIONS, BENCH_AT_REST_SESSIONS, BENCH_AT_REST_TURNS, BENCH_COMPRESSION,
BENCH_PG_BYTES_SESSIONS, BENCH_PG_BYTES_TURNS,
BENCH_DIR, BENCH_KEEP, BENCH_JSON, BENCH_NODE_HEAP_MB, BENCH_LOADGEN.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from bench import (
    appends,
    bytes_at_rest,
    cold,
    fork,
    keys,
    limits,
    metrics,
    pg_bytes,
    postgres,
    restart,
    shares,
    sidebar,
    small,
    standby,
    stream,
)
from bench.load import have_wrk
from bench.report import Row, render
from bench.util import fdatasync_latency, log

SECTIONS: dict[str, Callable[[Path], list[Row]]] = {
    "fork": fork.run,
    "appends": appends.run,
    "restart": restart.run,
    "cold": cold.run,
    "stream": stream.run,
    "keys": keys.run,
    "limits": limits.run,
    "postgres": postgres.run,
    "pg_bytes": pg_bytes.run,
    "small": small.run,
    "metrics": metrics.run,
    "sidebar": sidebar.run,
    "standby": standby.run,
    "at-rest": bytes_at_rest.run,
    "shares": shares.run,
}


def header(probes: list[tuple[float, float]], elapsed: float | None = None) -> str:
    load = os.getloadavg()
    loadgen = "wrk"
    if not have_wrk():
        loadgen = "Python asyncio (no wrk: `apt-get install wrk` for steadier append figures)"
    lines = [
        "forklog benchmarks (medians of several runs; ratio = forklog / baseline)",
        f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, load average at the end "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, load generator: {loadgen}",
    ]
    lines.append(
        "fdatasync of a small append on the work folder's file system, median / p90: "
        + ", ".join(f"{m:.2f} / {p:.2f} ms" for m, p in probes)
        + " (at the start, at the end)"
    )
    if load[1] > 1.5:
        lines.append("WARNING: the machine was busy with other work; figures are noisier than on a quiet machine")
    if max(m for m, _ in probes) > 0.5:
        lines.append("WARNING: fdatasync is slow (another process is using the disk): durable figures are pessimistic")
    if elapsed is not None:
        lines.append(f"run time: {elapsed:.0f} s")
    return "\n".join(lines)


def main() -> int:
    chosen = [name.strip() for name in os.environ.get("BENCH_ONLY", ",".join(SECTIONS)).split(",") if name.strip()]
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        print(f"unknown BENCH_ONLY section(s): {', '.join(unknown)}; use {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    base = os.environ.get("BENCH_DIR")
    work = Path(tempfile.mkdtemp(prefix="forklog-bench-", dir=base))
    log(f"working in {work}")
    started = time.perf_counter()
    rows: list[Row] = []
    probes = [fdatasync_latency(work)]
    try:
        for name in chosen:
            section_started = time.perf_counter()
            rows += SECTIONS[name](work)
            log(f"{name}: done in {time.perf_counter() - section_started:.0f} s")
        probes.append(fdatasync_latency(work))
    finally:
        if os.environ.get("BENCH_KEEP"):
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(render(rows, header(probes, time.perf_counter() - started)))
    json_path = os.environ.get("BENCH_JSON")
    if json_path:
        Path(json_path).write_bytes(orjson.dumps([row.as_json() for row in rows], option=orjson.OPT_INDENT_2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
