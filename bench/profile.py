"""Profile the server on one benchmark scenario with py-spy (an optional tool: ``make bench-profile`` installs it).

    python -m bench.profile append1|append1-nofsync|batch100|fork|restart [seconds]

py-spy samples the running server (every thread, idle ones included, so a thread blocked in ``fdatasync`` shows
up) while the scenario's load runs, writes the raw collapsed stacks next to the work folder, and prints, per
thread, the functions that hold the most samples: "self" (the innermost frame, by line) and "total" (any frame on
the stack, by function).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from bench import appends, gen, restart
from bench.load import run_load
from bench.util import Client, Server, env_int, log, running, start_forklog

_LINE = re.compile(r":\d+\)$")


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        sys.exit("py-spy is not installed: `make bench-profile` installs it into .venv (not a runtime dependency)")
    return found


def attach(server: Server, output: Path) -> subprocess.Popen[bytes]:
    argv = [py_spy(), "record", "--pid", str(server.pid), "--rate", "250", "--format", "raw", "--output", str(output)]
    argv += ["--idle", "--threads", "--nonblocking"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)  # let it attach
    return process


def detach(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
    process.wait(timeout=120)


def summarize(raw: Path, top: int = 12) -> str:
    by_thread: dict[str, Counter[str]] = defaultdict(Counter)
    total_by_thread: dict[str, Counter[str]] = defaultdict(Counter)
    samples: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        thread = frames[0].split(": ", 1)[-1]
        frames = frames[1:] or ["<no python frame>"]
        samples[thread] += count
        by_thread[thread][frames[-1]] += count
        for name in {_LINE.sub(")", frame) for frame in frames}:
            total_by_thread[thread][name] += count
    out = []
    for thread, n in samples.most_common():
        busiest, count = by_thread[thread].most_common(1)[0]
        if count >= 0.98 * n and "concurrent/futures/thread.py" in busiest:
            continue  # an idle thread of a pool
        out.append(f"\n== thread {thread}: {n} samples (idle time included) ==")
        out.append("  self (innermost frame):")
        for frame, count in by_thread[thread].most_common(top):
            out.append(f"    {100 * count / n:5.1f}%  {frame}")
        out.append("  total (on the stack):")
        for frame, count in total_by_thread[thread].most_common(top):
            out.append(f"    {100 * count / n:5.1f}%  {frame}")
    return "\n".join(out)


def profile_appends(work: Path, batch: int, seconds: float, *, fsync: bool = True) -> Path:
    raw = work / f"profile-append{batch}{'' if fsync else '-nofsync'}.txt"
    server = start_forklog(work / "data", work / "server.log", fsync=fsync)
    with running(server):
        server.wait_ready()
        client = Client(server.port)
        clients = env_int("BENCH_CLIENTS", 32)
        for i in range(clients):
            seed = appends._open_step_seed()
            client.expect(201, "POST", "/sessions", {"id": f"{appends.PREFIX}{i}", "seed": seed})
        body = appends.append_body(batch)
        run_load(server.port, appends.PREFIX, body, clients=clients, seconds=1)
        spy = attach(server, raw)
        result = run_load(server.port, appends.PREFIX, body, clients=clients, seconds=seconds)
        detach(spy)
        log(f"{batch}-event appends under py-spy: {result.rps:,.0f} req/s, p50 {result.p50_ms:.1f} ms")
    return raw


def profile_fork(work: Path, seconds: float) -> Path:
    raw = work / "profile-fork.txt"
    n = env_int("BENCH_PROFILE_EVENTS", 1_000_000)
    sid = "bench-profile-fork"
    gen.write_session(work / "data" / "sessions", sid, n, created_at=1_700_000_000_000)
    server = start_forklog(work / "data", work / "server.log")
    with running(server):
        server.wait_ready()
        client = Client(server.port)
        spy = attach(server, raw)
        deadline = time.perf_counter() + seconds
        forks = 0
        while time.perf_counter() < deadline:
            client.expect(201, "POST", f"/sessions/{sid}/fork", {"sessionId": f"child-{forks}"})
            client.expect(204, "DELETE", f"/sessions/child-{forks}")
            forks += 1
        detach(spy)
        log(f"{forks} forks (and deletes) of {n:,} events under py-spy")
    return raw


def profile_restart(work: Path) -> Path:
    raw = work / "profile-restart.txt"
    total = env_int("BENCH_RESTART_BYTES", 200_000_000)
    restart.build(work / "data", total, env_int("BENCH_RESTART_SESSION_EVENTS", 10_000))
    server = start_forklog(work / "data", work / "server.log")
    with running(server):
        spy = attach(server, raw)
        ready = server.wait_ready()
        detach(spy)
        log(f"restart under py-spy: ready after {ready:.1f} s")
    return raw


def main() -> int:
    scenario = sys.argv[1] if len(sys.argv) > 1 else "append1"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    work = Path(tempfile.mkdtemp(prefix="forklog-profile-"))
    if scenario == "append1":
        raw = profile_appends(work, 1, seconds)
    elif scenario == "append1-nofsync":
        raw = profile_appends(work, 1, seconds, fsync=False)
    elif scenario == "batch100":
        raw = profile_appends(work, 100, seconds)
    elif scenario == "fork":
        raw = profile_fork(work, seconds)
    elif scenario == "restart":
        raw = profile_restart(work)
    else:
        print("scenarios: append1, append1-nofsync, batch100, fork, restart", file=sys.stderr)
        return 2
    kept = Path(tempfile.gettempdir()) / "forklog-bench-profiles"
    kept.mkdir(exist_ok=True)
    target = kept / raw.name
    shutil.copy(raw, target)
    shutil.rmtree(work, ignore_errors=True)
    print(f"py-spy profile of scenario {scenario!r} (raw collapsed stacks: {target})")
    print(summarize(target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
