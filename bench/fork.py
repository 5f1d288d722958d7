"""Fork and snapshot against copying bytes, and against DSH's own in-memory fork.

Sessions of 10k, 100k and 1M events (``BENCH_FORK_SIZES``) are generated straight into a data directory as JSONL
files (bench/gen.py) and recovered by the server at start. Then, run by run and interleaved:

- copy: ``os.copy_file_range`` of the session's file into a new file, ``fsync`` of it and of its folder, which is
  the physical floor of a durable fork (the same bytes written once, in the kernel, no parsing);
- fork: ``POST /sessions/{id}/fork`` end to end over HTTP (the child's file is written and synced before the 201);
  the child is deleted afterwards, outside the timing;
- snapshot: ``POST /sessions/{id}/snapshot`` until the last byte of the answer (the seed) is read.

One untimed copy and fork come first at each size (warm-up).

The DSH rows run bench/dsh_fork.mjs under node on the same files: the published store creates the source session
from the events as a seed, then forks it at the same ``turn/end``, timed inside node with ``performance.now()``.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from app.domain.dsh_frames import decode_log
from bench import dsh, gen
from bench.report import Row, skipped
from bench.restart import compression
from bench.small import wait_for_checkpoints
from bench.util import (
    Client,
    env_int,
    fsync_dir,
    human_bytes,
    human_count,
    log,
    median,
    running,
    start_forklog,
    vm_hwm_bytes,
    vm_rss_bytes,
)

DEFAULT_SIZES = "10000,100000,1000000"
# Sessions of many short turns built by appends over HTTP (events, turns), as agents that take many small turns do.
APPENDED = ((100_000, 950),)


def sizes() -> list[int]:
    raw = os.environ.get("BENCH_FORK_SIZES", DEFAULT_SIZES)
    return [int(part.replace("_", "")) for part in raw.split(",") if part.strip()]


def session_id(n_events: int) -> str:
    return f"bench-fork-{human_count(n_events).lower()}"


def copy_and_sync(source: Path, folder: Path) -> float:
    """Seconds to copy ``source`` into a new file of ``folder`` in the kernel and make it durable."""
    target = folder / f"copy-{uuid.uuid4().hex}"
    started = time.perf_counter()
    src = os.open(source, os.O_RDONLY)
    dst = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        remaining = os.fstat(src).st_size
        while remaining > 0:
            copied = os.copy_file_range(src, dst, remaining)
            if copied == 0:
                break
            remaining -= copied
        os.fsync(dst)
    finally:
        os.close(src)
        os.close(dst)
    fsync_dir(folder)
    elapsed = time.perf_counter() - started
    target.unlink()
    return elapsed


def time_forks(
    client: Client, sid: str, path: Path, copies: Path, runs: int
) -> tuple[float, float, float, list[float]]:
    """Medians of the copy, the durable fork and the snapshot of ``sid`` (interleaved), and the fork times."""
    size = path.stat().st_size
    copy_times, fork_times, snap_times = [], [], []
    # One untimed round first: the first fork and copy of a size pay one-time costs (the allocator's and the page
    # cache's first growth) that a long-running service does not pay on every fork.
    copy_and_sync(path, copies)
    client.expect(201, "POST", f"/sessions/{sid}/fork", {"sessionId": f"{sid}-warmup"})
    client.expect(204, "DELETE", f"/sessions/{sid}-warmup")
    for r in range(runs):
        copy_times.append(copy_and_sync(path, copies))
        child = f"{sid}-child-{r}"
        started = time.perf_counter()
        client.expect(201, "POST", f"/sessions/{sid}/fork", {"sessionId": child})
        fork_times.append(time.perf_counter() - started)
        client.expect(204, "DELETE", f"/sessions/{child}")
        started = time.perf_counter()
        body = client.expect(200, "POST", f"/sessions/{sid}/snapshot", b"")
        snap_times.append(time.perf_counter() - started)
        if len(body) < size // 2:
            raise RuntimeError(f"snapshot of {sid} is only {len(body)} bytes")
        del body
    return median(copy_times), median(fork_times), median(snap_times), fork_times


def ten_forks_row(client: Client, pid: int, data: Path, sid: str, label: str) -> Row:
    """The server's resident set before and after ten forks of ``sid`` (kept while measured), each time once the
    background checkpoint rounds have caught up (what the forks keep, not what a round uses while it runs)."""
    wait_for_checkpoints(data)
    before = vm_rss_bytes(pid)
    for k in range(10):
        client.expect(201, "POST", f"/sessions/{sid}/fork", {"sessionId": f"{sid}-ten-{k}"})
    wait_for_checkpoints(data)
    after = vm_rss_bytes(pid)
    for k in range(10):
        client.expect(204, "DELETE", f"/sessions/{sid}-ten-{k}")
    growth = (after - before) / before
    log(f"fork: ten forks of {sid}: VmRSS {human_bytes(before)} -> {human_bytes(after)}")
    return Row(
        "Fork",
        f"ten forks of the {label} session: memory",
        f"{growth:+.1%}",
        "VmRSS before",
        human_bytes(before),
        after / before,
        "< +10%",
        growth < 0.10,
        f"VmRSS {human_bytes(after)} with the ten children live",
    )


def fork_rows(
    label: str, copy_s: float, fork_s: float, snap_s: float, fork_times: list[float], target: float = 3.0
) -> list[Row]:
    return [
        Row(
            "Fork",
            f"{label}: durable fork",
            f"{fork_s * 1e3:.1f} ms",
            "copy_file_range+fsync",
            f"{copy_s * 1e3:.1f} ms",
            fork_s / copy_s,
            f"<= {target:g}x",
            fork_s <= target * copy_s,
            f"median of {len(fork_times)}",
        ),
        Row(
            "Fork",
            f"{label}: snapshot",
            f"{snap_s * 1e3:.1f} ms",
            "copy_file_range+fsync",
            f"{copy_s * 1e3:.1f} ms",
            snap_s / copy_s,
            note="whole seed read over HTTP",
        ),
    ]


def runs_for(n_events: int) -> int:
    return env_int("BENCH_RUNS", 5) if n_events < 1_000_000 else env_int("BENCH_RUNS_1M", 3)


def run(work: Path) -> list[Row]:
    data = work / "fork-data"
    sessions = data / "sessions"
    copies = data / "copies"  # same file system as the sessions
    copies.mkdir(parents=True, exist_ok=True)
    encoding = compression()
    gen.record_compression(data, encoding)
    suffix = ".jsonl.zstd" if encoding == "zstd" else ".jsonl"
    files: dict[int, Path] = {}
    for i, n in enumerate(sizes()):
        started = time.perf_counter()
        size = gen.write_session(sessions, session_id(n), n, created_at=1_700_000_000_000 + i, compression=encoding)
        files[n] = sessions / f"{session_id(n)}{suffix}"
        log(f"fork: wrote {human_count(n)} events ({human_bytes(size)}) in {time.perf_counter() - started:.1f} s")

    rows: list[Row] = []
    forks: dict[int, float] = {}
    server = start_forklog(data, work / "logs" / "fork-forklog.log")
    with running(server):
        ready = server.wait_ready()
        recovered_peak = vm_hwm_bytes(server.pid)
        stored = sum(path.stat().st_size for path in files.values())
        max_size = max(path.stat().st_size for path in files.values())
        log(f"fork: server recovered {sum(files)} events and was ready after {ready:.1f} s")
        client = Client(server.port)
        for n, path in files.items():
            sid = session_id(n)
            size = path.stat().st_size
            copy_s, fork_s, snap_s, fork_times = time_forks(client, sid, path, copies, runs_for(n))
            forks[n] = fork_s
            log(
                f"fork: {human_count(n)}: copy {copy_s * 1e3:.1f} ms, fork {fork_s * 1e3:.1f} ms, "
                f"snapshot {snap_s * 1e3:.1f} ms"
            )
            rows += fork_rows(f"{human_count(n)} events ({human_bytes(size)})", copy_s, fork_s, snap_s, fork_times)
        largest = max(files)
        rows.append(ten_forks_row(client, server.pid, data, session_id(largest), f"{human_count(largest)} events"))
        for n, turns in APPENDED:
            sid = f"bench-fork-appended-{human_count(n).lower()}"
            started = time.perf_counter()
            client.expect(201, "POST", "/sessions", {"id": sid})
            for turn in gen.appended_turns(n, turns):
                client.expect(201, "POST", f"/sessions/{sid}/events", {"events": turn})
            path = sessions / f"{sid}{suffix}"
            size = path.stat().st_size
            log(
                f"fork: appended {human_count(n)} events in {turns} turns ({human_bytes(size)}) in "
                f"{time.perf_counter() - started:.1f} s"
            )
            copy_s, fork_s, snap_s, fork_times = time_forks(client, sid, path, copies, runs_for(n))
            log(f"fork: appended {human_count(n)}: copy {copy_s * 1e3:.1f} ms, fork {fork_s * 1e3:.1f} ms")
            label = f"{human_count(n)} events in {turns} turns built by appends ({encoding}, {human_bytes(size)})"
            rows += fork_rows(label, copy_s, fork_s, snap_s, fork_times, target=1.5)
        client.close()
    rows.append(
        Row(
            "Fork",
            "memory after recovering these sessions",
            f"{recovered_peak / stored:.2f} B/B",
            "bytes on disk",
            human_bytes(stored),
            recovered_peak / stored,
            note=f"informative: VmHWM {human_bytes(recovered_peak)} once ready (largest file {human_bytes(max_size)}); "
            f"ready after {ready:.1f} s",
        )
    )

    rows += dsh_rows(files, forks)
    return rows


def dsh_rows(files: dict[int, Path], forks: dict[int, float]) -> list[Row]:
    wanted = {n for n in files if n >= 100_000}

    def target(n: int) -> str:
        return "< 1x" if n in wanted else ""

    ready = dsh.ensure_installed()
    if isinstance(ready, str):
        return [skipped("DSH", f"{human_count(n)} events: DSH in-memory fork", ready, target(n)) for n in files]
    rows = []
    for n, path in files.items():
        if path.name.endswith(".zstd"):  # DSH's fork timing reads the raw log: the same lines, decompressed
            raw = path.with_name(path.name.removesuffix(".zstd") + ".raw.jsonl")
            raw.write_bytes(decode_log(path.read_bytes()))
            path = raw
        result = dsh.time_fork(ready, path, runs_for(n))
        if isinstance(result, str):
            rows.append(skipped("DSH", f"{human_count(n)} events: DSH in-memory fork", result, target(n)))
            continue
        dsh_fork = median(result["fork_ms"]) / 1e3
        ratio = forks[n] / dsh_fork
        log(f"dsh: {human_count(n)}: create {result['create_ms']:.0f} ms, fork {dsh_fork * 1e3:.1f} ms")
        rows.append(
            Row(
                "DSH",
                f"{human_count(n)} events: forklog durable fork vs DSH fork",
                f"{forks[n] * 1e3:.1f} ms",
                "DSH fork, in memory",
                f"{dsh_fork * 1e3:.1f} ms",
                ratio,
                target(n),
                ratio < 1 if n in wanted else None,
                f"DSH create from seed {result['create_ms']:.0f} ms",
            )
        )
    return rows
