"""Helpers of the "proof under fire" suites: valid turns, a real server process, and checks over a whole data dir.

Everything here talks only to 127.0.0.1. Long runs are opt-in: ``FORKLOG_FUZZ_LONG=1`` scales the bounded
defaults up (more examples, more operations, more crash rounds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from app.api.wire.problems import PROBLEM_JSON, PROBLEMS
from app.domain.jsonvalue import loads as lossless_loads
from app.domain.log import seed_log
from tests.events import assistant_message, user_message

REPO = Path(__file__).resolve().parents[2]
LONG = os.environ.get("FORKLOG_FUZZ_LONG", "") not in ("", "0", "false", "no")
SPEC_CODES = frozenset(PROBLEMS)
# The only 5xx answers the contract allows; INTERNAL (500) never is.
SPEC_503_CODES = frozenset({"NOT_READY", "STORAGE_UNAVAILABLE", "SESSION_CORRUPT"})

# The lossless parser raises the interpreter's recursion limit on its first use. Hypothesis warns (an error under
# this project's filterwarnings) when the limit changes inside a test, so the first use happens here, at import.
lossless_loads(b"{}")


def scaled(short: int, long: int) -> int:
    """``short`` by default, ``long`` under FORKLOG_FUZZ_LONG=1."""
    return long if LONG else short


# -- valid events ----------------------------------------------------------------------------------------------------


def turn_events(turn: int, *, text: str = "hello", steps: int = 1, chunks: int = 2) -> list[dict[str, Any]]:
    """One whole turn (``turn/start`` .. ``turn/end``) of appendable events: no seq, no time."""
    events: list[dict[str, Any]] = [{"type": "turn/start", "data": {"turn": turn}}, user_message(f"{text} {turn}")]
    for step in range(1, steps + 1):
        events.append({"type": "step/start", "data": {"turn": turn, "step": step}})
        for index in range(chunks):
            chunk = {"type": "text-delta", "index": 0, "text": f"c{index}"}
            events.append({"type": "assistant/chunk", "data": {"turn": turn, "step": step, "chunk": chunk}})
        events.append(assistant_message(turn, step, f"answer {turn}.{step}"))
        events.append({"type": "step/end", "data": {"turn": turn, "step": step}})
    events.append({"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}})
    return events


def seed_of_turns(turns: int, **kwargs: Any) -> list[dict[str, Any]]:
    return [event for turn in range(1, turns + 1) for event in turn_events(turn, **kwargs)]


# -- answers ---------------------------------------------------------------------------------------------------------


def problem_code(response: httpx.Response) -> str:
    """The problem's ``code``, after checking that the answer is a well-formed problem with a spec code."""
    assert response.headers.get("content-type", "").startswith(PROBLEM_JSON), (
        response.status_code,
        response.headers.get("content-type"),
        response.text[:300],
    )
    body = response.json()
    code = body.get("code")
    assert code in SPEC_CODES, body
    assert PROBLEMS[code].status == response.status_code == body["status"], body
    return str(code)


def assert_no_forbidden_5xx(response: httpx.Response) -> None:
    if response.status_code >= 500:
        code = problem_code(response)
        assert code in SPEC_503_CODES, (response.status_code, response.text[:500])


# -- files -----------------------------------------------------------------------------------------------------------


def data_files(data_dir: Path) -> dict[str, bytes]:
    """Every file under ``<data>/sessions`` and ``<data>/tmp``, by relative path, with its bytes."""
    found: dict[str, bytes] = {}
    for folder in ("sessions", "tmp"):
        root = data_dir / folder
        if root.is_dir():
            for path in sorted(root.rglob("*")):
                if path.is_file():
                    found[str(path.relative_to(data_dir))] = path.read_bytes()
    return found


# -- a real server process -------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServerProcess:
    """``python -m app`` on 127.0.0.1 and a free port, over ``data_dir``; :meth:`stop` or :meth:`kill` ends it."""

    def __init__(self, data_dir: Path, *, args: tuple[str, ...] = (), log_path: Path | None = None) -> None:
        self.data_dir = data_dir
        self.args = args
        self.log_path = log_path or data_dir.parent / f"server-{data_dir.name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, *, timeout: float = 30.0) -> ServerProcess:
        assert self.process is None or self.process.poll() is not None, "already running"
        for _ in range(5):
            self.port = free_port()
            command = [
                sys.executable,
                "-m",
                "app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--data-dir",
                str(self.data_dir),
                "--log-level",
                "warning",
                *self.args,
            ]
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
            if self._wait_ready(timeout):
                return self
            self.stop()
        raise AssertionError(f"the server did not become ready; its log:\n{self.log_text()[-4000:]}")

    def _wait_ready(self, timeout: float) -> bool:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.base_url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/readyz").status_code == 200:
                        return True
                time.sleep(0.05)
        return False

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def rss_bytes(self) -> int:
        """The process's resident set (VmRSS of /proc/<pid>/status)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS line")

    def kill(self) -> None:
        """kill -9: no shutdown, no flush, nothing."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@contextlib.contextmanager
def running_server(data_dir: Path, *args: str) -> Iterator[ServerProcess]:
    server = ServerProcess(data_dir, args=tuple(args)).start()
    try:
        yield server
    finally:
        server.stop()


# -- whole-service checks --------------------------------------------------------------------------------------------


def read_all_events(client: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        response = client.get(f"/sessions/{session_id}/events", params={"from": len(events), "limit": 10000})
        assert response.status_code == 200, response.text[:500]
        page = response.json()
        events.extend(page["events"])
        if page["nextSeq"] >= page["eventCount"]:
            return events


def list_sessions(client: httpx.Client) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if cursor is not None:
            params["cursor"] = cursor
        response = client.get("/sessions", params=params)
        assert response.status_code == 200, response.text[:500]
        page = response.json()
        items.extend(page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            return items


def check_every_log(client: httpx.Client) -> dict[str, list[dict[str, Any]]]:
    """Every live session's log, re-read and re-validated: seqs contiguous, the log accepted as a seed
    (:func:`~app.domain.log.seed_log`, so every event still passes every rule), and the Session resource agrees.
    Forks must equal their source's prefix at a ``turn/end`` (checked when the source is still live)."""
    sessions = list_sessions(client)
    logs: dict[str, list[dict[str, Any]]] = {}
    for session in sessions:
        events = read_all_events(client, session["id"])
        assert [event["seq"] for event in events] == list(range(len(events))), session["id"]
        assert session["eventCount"] == len(events), session["id"]
        seed_log(events, now=0)
        logs[session["id"]] = events
    for session in sessions:
        parent = session["parentSession"]
        if parent is None or parent not in logs or session["seedLength"] is None:
            continue
        seed_length = session["seedLength"]
        seed = logs[session["id"]][:seed_length]
        assert seed == logs[parent][:seed_length], f"fork {session['id']} is not a prefix of {parent}"
        if seed_length:
            assert seed[-1]["type"] == "turn/end", session["id"]
    return logs
