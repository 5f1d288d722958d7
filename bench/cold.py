"""Cold start: the first start on files no checkpoint covers, and a crash right after it.

The data directory holds ``BENCH_COLD_BYTES`` (default 200 MB) of realistic sessions of
``BENCH_RESTART_SESSION_EVENTS`` events each, written straight into ``sessions/`` (as another program, a copy or a
restored backup without its index leaves them). Before each timed first start the index folder is removed, so no
checkpoint covers any file and every event is checked against every rule. The baseline, as in the restart section,
reads the same files and ``orjson.loads`` every line; runs are interleaved with it.

- *first start*: from spawning ``python -m app`` to the first 200 from ``/readyz``. **Target: <= 3x.**
- *after kill -9 right after a cold start*: that first start, once ready, gets one append to every session and is
  killed with SIGKILL at once (before any background checkpoint round could run); the next start is timed.
  **Target: <= 2x** (a clean restart's speed: what the first start checked is journaled before it is ready).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from bench.report import Row
from bench.restart import build, compression, parse_all
from bench.util import Client, env_int, human_bytes, log, median, running, start_forklog, vm_hwm_bytes

NOTE = {"type": "bench/note", "data": {"note": "right after the cold start"}}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and of its children it has waited for (the check workers)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def parse_cpu(sessions: Path) -> float:
    """CPU seconds of :func:`parse_all` (steadier than its wall time on a shared machine)."""
    started = time.process_time()
    parse_all(sessions)
    return time.process_time() - started


def first_start(data: Path, log_path: Path, sessions: list[str], *, crash: bool) -> tuple[float, int, float]:
    """Seconds from spawn to /readyz with no index, the server's peak memory and CPU seconds (its workers' too)
    then; with ``crash`` one event is appended to every session and the server killed (SIGKILL), else it is
    stopped cleanly."""
    shutil.rmtree(data / "index", ignore_errors=True)
    server = start_forklog(data, log_path)
    with running(server):
        ready = server.wait_ready()
        peak = vm_hwm_bytes(server.pid)
        cpu = cpu_seconds(server.pid)
        if crash:
            client = Client(server.port)
            try:
                for session_id in sessions:
                    client.expect(201, "POST", f"/sessions/{session_id}/events", {"events": [NOTE]})
            finally:
                client.close()
            server.process.send_signal(signal.SIGKILL)
            server.process.wait()
        return ready, peak, cpu


def next_start(data: Path, log_path: Path) -> float:
    server = start_forklog(data, log_path)
    with running(server):
        return server.wait_ready()


def run(work: Path) -> list[Row]:
    total = env_int("BENCH_COLD_BYTES", 200_000_000)
    per_session = env_int("BENCH_RESTART_SESSION_EVENTS", 10_000)
    runs = env_int("BENCH_RESTART_RUNS", 3)
    data = work / "cold-data"
    started = time.perf_counter()
    files, stored, events = build(data, total, per_session)
    sessions = [f"bench-restart-{number:05d}" for number in range(files)]
    took = time.perf_counter() - started
    log(f"cold: wrote {files} sessions, {events:,} events, {human_bytes(stored)} in {took:.1f} s")
    logs = work / "logs" / "cold-forklog.log"
    parse_times: list[float] = []
    first_times: list[float] = []
    crash_times: list[float] = []
    peaks: list[int] = []
    cpus: list[float] = []
    parse_cpus: list[float] = []
    for r in range(runs):
        parse_times.append(parse_all(data / "sessions"))
        parse_cpus.append(parse_cpu(data / "sessions"))
        ready, peak, cpu = first_start(data, logs, sessions, crash=False)
        first_times.append(ready)
        peaks.append(peak)
        cpus.append(cpu)
        log(
            f"cold: first start {r + 1}/{runs}: ready after {ready:.2f} s, {cpu:.2f} CPU s "
            f"(parse {parse_times[-1]:.2f} s, {parse_cpus[-1]:.2f} CPU s)"
        )
    for r in range(runs):
        parse_times.append(parse_all(data / "sessions"))
        first_start(data, logs, sessions, crash=True)
        crash_times.append(next_start(data, logs))
        log(f"cold: after kill -9 right after a first start {r + 1}/{runs}: ready after {crash_times[-1]:.2f} s")
    parse_s, first_s, crash_s = median(parse_times), median(first_times), median(crash_times)
    label = f"{compression()}, {human_bytes(stored)} of raw JSONL, {files} sessions, {events:,} events"
    return [
        Row(
            "Cold start",
            f"first start, files no checkpoint covers ({label})",
            f"{first_s:.2f} s",
            "read + orjson.loads per line",
            f"{parse_s:.2f} s",
            first_s / parse_s,
            "<= 3x",
            first_s <= 3 * parse_s,
            f"{events / first_s:,.0f} events/s checked; CPU {median(cpus):.2f} s (server and its check workers) vs "
            f"{median(parse_cpus):.2f} s ({median(cpus) / median(parse_cpus):.2f}x); VmHWM {human_bytes(max(peaks))} "
            f"({max(peaks) / stored:.2f} B/B, the server's own; the workers are other processes)",
        ),
        Row(
            "Cold start",
            f"start after kill -9 right after a first start, one append to every session ({label})",
            f"{crash_s:.2f} s",
            "read + orjson.loads per line",
            f"{parse_s:.2f} s",
            crash_s / parse_s,
            "<= 2x",
            crash_s <= 2 * parse_s,
            "the first start's checks were journaled before it was ready",
        ),
    ]
