"""A crash right after a cold start (spec 4, "Recovery"): files no checkpoint covers are checked once; killed with
SIGKILL right after ``/readyz`` first answered 200, the next start checks only what was appended since."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.backends.files import builders as b
from tests.backends.files.test_cold_start import uncovered_store
from tests.e2e.conftest import StartServer

RECOVERED = re.compile(r"recovered (\d+) sessions \((\d+) events, (\d+) of them checked")


def recovered(log: str) -> list[tuple[int, int, int]]:
    """(sessions, events, events checked) of every start the server's log tells of, in order."""
    return [(int(a), int(b), int(c)) for a, b, c in RECOVERED.findall(log)]


def test_a_kill_right_after_readiness_does_not_check_the_store_again(tmp_path: Path, start_server: StartServer) -> None:
    data_dir = tmp_path / "data"
    names = uncovered_store(data_dir, sessions=8, turns=30)
    total = 8 * len(b.turns(1, 30))
    server = start_server(data_dir)  # returns once /readyz answered 200
    with httpx.Client(base_url=server.base, timeout=10.0) as client:
        for name in names:
            answer = client.post(f"/sessions/{name}/events", json={"events": [b.log_only("right after the start")]})
            assert answer.status_code == 201, answer.text
        expected = {name: client.get(f"/sessions/{name}/events", params={"limit": 10000}).json() for name in names}
    server.kill()  # SIGKILL: no clean stop, and (well within its first second) no background round

    again = start_server(data_dir)
    first, second = recovered(server.output()) + recovered(again.output())
    assert first == (8, total, total)  # no checkpoint covered the files: every event checked
    # The second start checked the 8 appended events at most (none, had a background round come before the kill).
    assert second[:2] == (8, total + 8) and second[2] <= 8
    with httpx.Client(base_url=again.base, timeout=10.0) as client:
        for name in names:
            assert client.get(f"/sessions/{name}/events", params={"limit": 10000}).json() == expected[name]
        assert client.get("/readyz").json()["corrupt"] == []


_NOTE_THE_WEB_STACK = """
import sys
from app.backends.files.backend import FileBackend


def begin_opening(self: FileBackend) -> None:
    print("web stack imported:", "fastapi" in sys.modules, "uvicorn" in sys.modules, flush=True)
    raise SystemExit(0)


FileBackend.begin_opening = begin_opening
from app.cli.main import main

main(["--data-dir", sys.argv[1]])
"""


def test_a_service_on_files_begins_reading_them_before_it_imports_its_web_stack(tmp_path: Path) -> None:
    """The files are read (and, on a cold start, checked on every core) while the service imports and builds the
    rest of itself, instead of after."""
    started = subprocess.run(
        [sys.executable, "-c", _NOTE_THE_WEB_STACK, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert started.stdout == "web stack imported: False False\n"
