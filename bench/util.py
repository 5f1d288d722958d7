"""Shared pieces: the server processes under test, a bare HTTP client, process memory, medians."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries only the result table."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw.replace("_", "")) if raw else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def vm_rss_bytes(pid: int) -> int:
    """The resident set of process ``pid`` now (VmRSS from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def vm_hwm_bytes(pid: int) -> int:
    """The peak resident set size (VmHWM) of a live process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for pid {pid}")


def fdatasync_latency(folder: Path, samples: int = 100) -> tuple[float, float]:
    """(median, p90) milliseconds of ``fdatasync`` after appending a 150-byte line, on ``folder``'s file system."""
    path = folder / "fdatasync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    timings = []
    try:
        for _ in range(samples):
            os.write(fd, b"x" * 149 + b"\n")
            started = time.perf_counter()
            os.fdatasync(fd)
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    timings.sort()
    return median(timings), timings[int(0.9 * len(timings))]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Client:
    """One keep-alive HTTP/1.1 connection; ``call`` returns (status, body bytes)."""

    def __init__(self, port: int, timeout: float = 600.0, *, key: str | None = None) -> None:
        self._conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
        self._auth = {"Authorization": f"Bearer {key}"} if key else {}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        payload = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        headers.update(self._auth)
        self._conn.request(method, path, body=payload, headers=headers)
        response = self._conn.getresponse()
        return response.status, response.read()

    def expect(self, status: int, method: str, path: str, body: Any = None) -> bytes:
        got, data = self.call(method, path, body)
        if got != status:
            raise RuntimeError(f"{method} {path} answered {got}, expected {status}: {data[:300]!r}")
        return data

    def close(self) -> None:
        self._conn.close()


@dataclass
class Server:
    """A server process under test (forklog or the empty-route app)."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    started: float  # perf_counter() just before the process was spawned

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, path: str = "/readyz", timeout: float = 900.0) -> float:
        """Poll ``path`` until it answers 200; return seconds since the spawn."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}; see {self.log_path}")
            try:
                conn = http.client.HTTPConnection(HOST, self.port, timeout=5)
                conn.request("GET", path)
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    return time.perf_counter() - self.started
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"server not ready after {timeout}s; see {self.log_path}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def spawn(argv: list[str], log_path: Path, port: int) -> Server:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as sink:
        started = time.perf_counter()
        process = subprocess.Popen(argv, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    return Server(process, port, log_path, started)


def forklog_argv(
    port: int, data_dir: Path, *, log_level: str = "warning", fsync: bool = True, extra: tuple[str, ...] = ()
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "app",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--log-level",
        log_level,
        *extra,
    ]
    return argv if fsync else [*argv, "--no-fsync"]


def start_forklog(
    data_dir: Path, log_path: Path, *, log_level: str = "warning", fsync: bool = True, extra: tuple[str, ...] = ()
) -> Server:
    port = free_port()
    return spawn(forklog_argv(port, data_dir, log_level=log_level, fsync=fsync, extra=extra), log_path, port)


def start_empty_app(log_path: Path, *, validate: bool = False) -> Server:
    """The empty route (bench/empty_app.py): the raw-parse kind, or with ``validate`` the pydantic-validating one."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.empty_app", "--port", str(port), "--log-level", "warning"]
    return spawn([*argv, "--validate"] if validate else argv, log_path, port)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and all its threads so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def running(server: Server) -> Iterator[Server]:
    try:
        yield server
    finally:
        server.stop()


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def human_count(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)
