"""The real service as a child process: ``python -m app`` on a free loopback port, stopped with SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def run_app(*args: str, env: dict[str, str] | None = None, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """``python -m app ARGS`` to completion (for settings and lock errors, which exit before serving)."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Server:
    """One ``python -m app`` process on ``data_dir``; its output goes to ``log_path``."""

    def __init__(self, data_dir: Path, log_path: Path, *, fsync: bool = False, args: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.fsync = fsync
        self.args = args
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace") if self.log_path.exists() else ""

    def start(self) -> Server:
        """Start and wait until /readyz answers 200; a port taken in between is retried on another port."""
        for _ in range(3):
            self.port = free_port()
            if self._launch():
                return self
            if "address already in use" not in self.output().lower():
                break
        raise AssertionError(f"forklog did not become ready on port {self.port}; its output:\n{self.output()}")

    def restart(self) -> Server:
        """SIGTERM, then start again on the same port and data directory: what a client's reconnect meets."""
        self.stop()
        if not self._launch():
            raise AssertionError(f"forklog did not come back on port {self.port}; its output:\n{self.output()}")
        return self

    def _launch(self) -> bool:
        args = [sys.executable, "-m", "app", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        if not self.fsync:
            args.append("--no-fsync")
        args.extend(self.args)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(args, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        return self._wait_ready()

    def _wait_ready(self) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if httpx.get(f"{self.base}/readyz", timeout=1.0).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.kill()
        return False

    def stop(self) -> int:
        """SIGTERM, then wait for a graceful exit; the exit status (uvicorn re-raises SIGTERM: -15 or 0)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"forklog did not stop within {STOP_TIMEOUT}s of SIGTERM:\n{self.output()}") from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)

    def get(self, path: str, **params: Any) -> httpx.Response:
        return httpx.get(self.base + path, params=params, timeout=10.0)

    def post(self, path: str, body: Any = None) -> httpx.Response:
        return httpx.post(self.base + path, json=body, timeout=10.0)


GRACEFUL_EXITS = (0, -signal.SIGTERM)
