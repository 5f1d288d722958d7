"""Restart: time from spawning the server to ``/readyz`` answering 200 with a data directory full of logs.

The data directory holds ``BENCH_RESTART_BYTES`` (default 200 MB; raise it to 1 GB with
``BENCH_RESTART_BYTES=1000000000``) of realistic sessions of ``BENCH_RESTART_SESSION_EVENTS`` events each (default
10k, about 1.9 MB a file). The baseline reads the same files and parses every line with ``orjson.loads``: the floor of
any recovery that looks at every event. Both run with the files in the page cache (they were just written), so
neither figure includes the disk.

Memory is the server's peak resident set (``VmHWM`` from /proc) once ready, per byte stored; an empty server's own
peak is shown beside it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import orjson
import zstandard

from bench import gen
from bench.report import Row
from bench.small import wait_for_checkpoints
from bench.util import env_int, human_bytes, log, median, running, start_forklog, vm_hwm_bytes


def compression() -> str:
    """The encoding of the data directories the restart and cold-start rows fill (``BENCH_COMPRESSION``: ``zstd``,
    a new directory's default, or ``none``)."""
    return os.environ.get("BENCH_COMPRESSION", "zstd")


def build(data: Path, total_bytes: int, events_per_session: int) -> tuple[int, int, int]:
    """Fill ``data/sessions`` with ``total_bytes`` of raw JSONL, in the encoding :func:`compression` names; return
    (files, bytes, events). The bytes are the raw JSONL's, whatever the encoding, so that both fill alike."""
    sessions = data / "sessions"
    encoding = compression()
    gen.record_compression(data, encoding)
    body = gen.event_lines(events_per_session)
    raw_size = len(body) + 200
    files = written = 0
    while written < total_bytes:
        gen.write_session(
            sessions,
            f"bench-restart-{files:05d}",
            events_per_session,
            created_at=1_700_000_000_000 + files,
            body=body,
            compression=encoding,
        )
        written += raw_size
        files += 1
    return files, written, files * events_per_session


def parse_all(sessions: Path) -> float:
    """Seconds to read every file (decompressing a ``.jsonl.zstd`` one whole, across its frames) and
    ``orjson.loads`` each of its lines."""
    started = time.perf_counter()
    decompressor = zstandard.ZstdDecompressor()
    for path in sorted(sessions.iterdir()):
        data = path.read_bytes()
        if path.name.endswith(".zstd"):
            data = decompressor.stream_reader(data, read_across_frames=True).read()
        for line in data.split(b"\n"):
            if line:
                orjson.loads(line)
    return time.perf_counter() - started


def start_to_ready(data: Path, log_path: Path, *, kill: bool = False) -> tuple[float, int]:
    """Seconds from spawn to /readyz and the peak memory then; the server is stopped cleanly (SIGINT), or with
    ``kill`` killed with SIGKILL once its background checkpoint rounds have caught up (what a crash leaves)."""
    server = start_forklog(data, log_path)
    with running(server):
        ready = server.wait_ready()
        peak = vm_hwm_bytes(server.pid)
        if kill:
            wait_for_checkpoints(data)
            server.process.send_signal(signal.SIGKILL)
            server.process.wait()
        return ready, peak


def run(work: Path) -> list[Row]:
    total = env_int("BENCH_RESTART_BYTES", 200_000_000)
    per_session = env_int("BENCH_RESTART_SESSION_EVENTS", 10_000)
    runs = env_int("BENCH_RESTART_RUNS", 3)
    data = work / "restart-data"
    started = time.perf_counter()
    files, stored, events = build(data, total, per_session)
    took = time.perf_counter() - started
    log(f"restart: wrote {files} sessions, {events:,} events, {human_bytes(stored)} in {took:.1f} s")
    empty_ready, empty_hwm = start_to_ready(work / "restart-empty", work / "logs" / "restart-empty.log")
    logs = work / "logs" / "restart-forklog.log"
    # The first start finds files no forklog has checked and checks every event; it is killed (SIGKILL) once its
    # background rounds have checkpointed them. Each next start is a start after kill -9 (and is killed again);
    # then the starts after a clean stop (SIGINT: the last round is written at the stop).
    first_parse = parse_all(data / "sessions")
    first_ready, first_peak = start_to_ready(data, logs, kill=True)
    log(f"restart: first start, no checkpoints: ready after {first_ready:.2f} s (parse {first_parse:.2f} s)")
    parse_times: list[float] = []
    killed_times: list[float] = []
    ready_times: list[float] = []
    peaks: list[int] = []
    for r in range(runs):
        parse_times.append(parse_all(data / "sessions"))
        ready, peak = start_to_ready(data, logs, kill=True)
        killed_times.append(ready)
        peaks.append(peak)
        log(f"restart: after kill -9 {r + 1}/{runs}: ready after {ready:.2f} s (parse {parse_times[-1]:.2f} s)")
    for r in range(runs):
        parse_times.append(parse_all(data / "sessions"))
        ready, peak = start_to_ready(data, logs)
        ready_times.append(ready)
        peaks.append(peak)
        log(f"restart: after a clean stop {r + 1}/{runs}: ready after {ready:.2f} s, VmHWM {human_bytes(peak)}")
    parse_s, ready_s, killed_s, peak = median(parse_times), median(ready_times), median(killed_times), max(peaks)
    label = f"{compression()}, {human_bytes(stored)} of raw JSONL, {files} sessions, {events:,} events"
    return [
        Row(
            "Restart",
            f"start to /readyz after kill -9 ({label})",
            f"{killed_s:.2f} s",
            "read + orjson.loads per line",
            f"{parse_s:.2f} s",
            killed_s / parse_s,
            "<= 2x",
            killed_s <= 2 * parse_s,
            f"{events / killed_s:,.0f} events/s; checkpoints written in the background while it ran",
        ),
        Row(
            "Restart",
            f"start to /readyz after a clean stop ({label})",
            f"{ready_s:.2f} s",
            "read + orjson.loads per line",
            f"{parse_s:.2f} s",
            ready_s / parse_s,
            "<= 2x",
            ready_s <= 2 * parse_s,
            f"{events / ready_s:,.0f} events/s; empty data dir: ready after {empty_ready:.2f} s",
        ),
        Row(
            "Restart",
            f"first start, no checkpoints: every event checked ({label})",
            f"{first_ready:.2f} s",
            "read + orjson.loads per line",
            f"{first_parse:.2f} s",
            first_ready / first_parse,
            "",
            None,
            f"{events / first_ready:,.0f} events/s checked (files written by another program, or a lost index); "
            f"VmHWM {human_bytes(first_peak)} ({first_peak / stored:.2f} B/B)",
        ),
        Row(
            "Restart",
            "peak memory (VmHWM) per stored byte, starts with checkpoints",
            f"{peak / stored:.2f} B/B",
            "bytes on disk",
            human_bytes(stored),
            peak / stored,
            "<= 1.5x",
            peak <= 1.5 * stored,
            f"VmHWM {human_bytes(peak)}; empty server {human_bytes(empty_hwm)}; "
            f"net of it {(peak - empty_hwm) / stored:.2f} B/B",
        ),
    ]
