"""Many small sessions: the start-up cost per session, apart from the cost per event.

    python -m bench.small gen DATA N [--empty]     # write N sessions into DATA/sessions (DATA/index emptied)
    python -m bench.small start DATA [RUNS] [--keep-index] [--fsync]
                                                   # time start to /readyz, RSS once ready, and the SIGTERM stop

Each session is a header and one whole turn (turn/start, user/message, step/start, assistant/message, step/end,
turn/end), the turn of the README's walk; with ``--empty``, a header alone. The bytes are the service's own: the
turn is checked and encoded by :func:`app.domain.log.seed_log` (as a create with a seed stores it) and the header
by :func:`app.domain.dsh_records.encode_header`. Files are written straight into ``sessions/`` (no fsync, no temp
file and link): this is about reading them, not about creating them.

``start`` runs ``python -m app --no-fsync --log-level warning`` on DATA (``--fsync``: the default, syncing
service): the first run finds what ``gen`` left (no checkpoints: every event checked, as after a crash with a lost
journal), each later run finds the checkpoints the previous clean stop wrote. For each run it prints the seconds
from spawn to the first 200 from ``/readyz`` (polled every 10 ms) and the server's CPU seconds by then, ``VmRSS``
and ``VmHWM`` once ready, and the seconds from SIGTERM to the process's exit. ``--keep-index`` keeps what
``DATA/index`` holds before the first run; by default it is emptied first.

As a section of ``make bench`` (``BENCH_ONLY=small``), :func:`run` writes ``BENCH_SMALL_SESSIONS`` (100,000)
sessions and reports the start with checkpoints, the start without, memory per session and the clean stop.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from app.domain.dsh_records import encode_header
from app.domain.log import seed_log
from app.domain.session import SessionHeader
from bench.report import Row
from bench.util import HOST, REPO, env_int, free_port, human_bytes, log

TURN = [
    {"type": "turn/start", "data": {"turn": 1}},
    {
        "type": "user/message",
        "surfaceOp": "append",
        "data": {
            "id": "u1",
            "role": "user",
            "content": [{"type": "text", "text": "Hello"}],
            "source": {"kind": "user"},
        },
    },
    {"type": "step/start", "data": {"turn": 1, "step": 1}},
    {
        "type": "assistant/message",
        "surfaceOp": "append",
        "data": {
            "turn": 1,
            "step": 1,
            "message": {
                "id": "a1",
                "role": "assistant",
                "content": [{"type": "text", "text": "Hi!"}],
                "source": {"kind": "model", "provider": "deepseek", "model": "deepseek-chat"},
            },
        },
    },
    {"type": "step/end", "data": {"turn": 1, "step": 1}},
    {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
]
CREATED_AT = 1_785_331_618_309
POLL_SECONDS = float(os.environ.get("BENCH_POLL_SECONDS", "0.01"))


def turn_lines(now: int = CREATED_AT) -> bytes:
    """The stored JSONL lines of the one turn, as the service encodes a seed."""
    return seed_log(TURN, now=now).lines()


def generate(data: Path, count: int, *, empty: bool = False) -> int:
    """Write ``count`` sessions into ``data/sessions`` (emptying ``data/index``); return the bytes written."""
    sessions = data / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(data / "index", ignore_errors=True)
    body = b"" if empty else turn_lines()
    written = 0
    for i in range(count):
        header = SessionHeader(id=f"small-{i:06d}", created_at=CREATED_AT + i, instance=uuid.uuid4().hex)
        content = encode_header(header) + body
        fd = os.open(sessions / f"{header.id}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, content)
        finally:
            os.close(fd)
        written += len(content)
    return written


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ready(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection(HOST, port, timeout=5)
        conn.request("GET", "/readyz")
        status = conn.getresponse().status
        conn.close()
        return status == 200
    except OSError:
        return False


def start_once(data: Path, log_path: Path, *, fsync: bool = False, kill: bool = False) -> dict[str, float]:
    """Start a server on ``data``, wait for /readyz, then stop it with SIGTERM (or SIGKILL with ``kill``, once its
    checkpoint journal has stopped growing)."""
    port = free_port()
    argv = [sys.executable, "-m", "app", "--port", str(port), "--data-dir", str(data), "--log-level", "warning"]
    if not fsync:
        argv.append("--no-fsync")
    # What the generator or the last run (without fsync) left dirty in the page cache is written back first: else
    # the kernel's writeback of the benchmark's own files shares the disk and the CPU with the start it times.
    os.sync()
    with open(log_path, "ab") as sink:
        started = time.perf_counter()
        process = subprocess.Popen(argv, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    try:
        while not _ready(port):
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}; see {log_path}")
            time.sleep(POLL_SECONDS)
        ready = time.perf_counter() - started
        memory = _status(process.pid)
        cpu_ready = _cpu_seconds(process.pid)
        if kill:
            wait_for_checkpoints(data)
        stopping = time.perf_counter()
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        _, status, _ = os.wait4(process.pid, 0)
        stop = time.perf_counter() - stopping
        process.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return {
        "ready_s": ready,
        "stop_s": stop,
        "cpu_ready_s": cpu_ready,
        "rss": memory["VmRSS"],
        "hwm": memory["VmHWM"],
    }


def wait_for_checkpoints(data: Path, quiet_seconds: float = 1.5, timeout: float = 600.0) -> None:
    """Wait until the server's checkpoint journal exists and has not grown for ``quiet_seconds`` (its background
    rounds have written what the start checked)."""
    journal = data / "index" / "checkpoints"
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        size = journal.stat().st_size if journal.exists() else -1
        if size != last:
            last, since = size, time.monotonic()
        elif size > 0 and time.monotonic() - since >= quiet_seconds:
            return
        time.sleep(0.1)
    raise RuntimeError(f"the checkpoint journal {journal} never settled")


def run(work: Path) -> list[Row]:
    """The ``small`` section of ``make bench``."""
    count = env_int("BENCH_SMALL_SESSIONS", 100_000)
    data = work / "small-data"
    started = time.perf_counter()
    stored = generate(data, count)
    log(f"small: wrote {count:,} sessions ({human_bytes(stored)}) in {time.perf_counter() - started:.1f} s")
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    empty = start_once(work / "small-empty", logs / "small-empty.log")
    first = start_once(data, logs / "small.log")  # no checkpoints: every event checked; the stop writes them
    log(f"small: first start {first['ready_s']:.2f} s, stop {first['stop_s']:.2f} s")
    clean = [start_once(data, logs / "small.log") for _ in range(env_int("BENCH_RESTART_RUNS", 3))]
    for result in clean:
        log(f"small: start after a clean stop {result['ready_s']:.2f} s, stop {result['stop_s']:.2f} s")
    killed = start_once(data, logs / "small.log", kill=True)
    after_kill = start_once(data, logs / "small.log")
    log(f"small: start after kill -9 {after_kill['ready_s']:.2f} s")
    ready = sorted(result["ready_s"] for result in clean)[len(clean) // 2]
    stop = max(result["stop_s"] for result in clean)
    rss = sorted(result["rss"] for result in clean)[len(clean) // 2]
    per_session = (rss - empty["rss"] - stored) / count
    del killed
    return [
        Row(
            "Small",
            f"start to /readyz, {count:,} sessions (a header and one turn each), after a clean stop",
            f"{ready:.2f} s",
            "target",
            "5 s",
            ready / 5,
            "<= 5 s",
            ready <= 5,
            f"{count / ready:,.0f} sessions/s; empty data dir {empty['ready_s']:.2f} s",
        ),
        Row(
            "Small",
            "the same after kill -9 (checkpoints written in the background)",
            f"{after_kill['ready_s']:.2f} s",
            "target",
            "5 s",
            after_kill["ready_s"] / 5,
            "<= 5 s",
            after_kill["ready_s"] <= 5,
        ),
        Row(
            "Small",
            "the same with no checkpoints at all (every event checked)",
            f"{first['ready_s']:.2f} s",
            "",
            "",
            None,
            note="files no forklog has checked (or a lost journal)",
        ),
        Row(
            "Small",
            "memory per session beyond its log bytes, once ready",
            f"{per_session:,.0f} B",
            "target",
            "1,024 B",
            per_session / 1024,
            "<= 1 KB",
            per_session <= 1024,
            f"VmRSS {human_bytes(rss)}, empty server {human_bytes(empty['rss'])}, files {human_bytes(stored)}",
        ),
        Row(
            "Small",
            "clean stop (SIGTERM to exit)",
            f"{stop:.2f} s",
            "compose's stop grace",
            "30 s",
            stop / 30,
            "fast",
            stop < 30,
            "the last checkpoint round: one journal append",
        ),
    ]


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "gen":
        data, count = Path(argv[1]), int(argv[2])
        started = time.perf_counter()
        written = generate(data, count, empty="--empty" in argv)
        print(f"{count} sessions, {written:,} bytes in {data / 'sessions'} ({time.perf_counter() - started:.1f} s)")
        return 0
    if len(argv) >= 2 and argv[0] == "start":
        data = Path(argv[1])
        runs = int(argv[2]) if len(argv) > 2 and argv[2].isdigit() else 3
        if "--keep-index" not in argv:
            shutil.rmtree(data / "index", ignore_errors=True)
        (data / "sessions").mkdir(parents=True, exist_ok=True)
        count = max(1, sum(1 for _ in os.scandir(data / "sessions")))
        for number in range(runs):
            result = start_once(data, data.parent / f"{data.name}-server.log", fsync="--fsync" in argv)
            kind = "no checkpoints" if number == 0 and "--keep-index" not in argv else "after a clean stop"
            ready = f"ready {result['ready_s']:.2f} s (CPU {result['cpu_ready_s']:.2f} s)"
            print(
                f"run {number} ({kind}): {ready}, RSS {result['rss'] / 1e6:.1f} MB "
                f"(HWM {result['hwm'] / 1e6:.1f} MB, {result['rss'] / count:,.0f} B a session), "
                f"SIGTERM to exit {result['stop_s']:.2f} s",
                flush=True,
            )
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
