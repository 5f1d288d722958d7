"""The service as an operator runs it: ``python -m app`` processes, the README's curl walk, restarts, bad starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.server import GRACEFUL_EXITS, REPO, Server, free_port, run_app

pytestmark = pytest.mark.e2e

WALK_MARK = "<!-- curl-walk -->"


def readme_walk(mark: str = WALK_MARK) -> str:
    """The one ```sh block that follows ``mark`` (the curl-walk mark by default) in README.md."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(re.escape(mark) + r"\s*```sh\n(.*?)```", readme, flags=re.DOTALL)
    assert len(blocks) == 1, f"README.md must hold exactly one ```sh block right after {mark}"
    walk: str = blocks[0]
    return walk


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    def json(self) -> Any:
        return json.loads(self.body)


def parse_curl_i(output: str) -> list[Answer]:
    """Split ``curl -si -w '\\n'`` output into its answers: status line, headers, a blank line, the body."""
    answers = []
    for chunk in re.split(r"(?m)^(?=HTTP/\d(?:\.\d)? \d{3} )", output):
        if not chunk.strip():
            continue
        head, _, body = chunk.partition("\r\n\r\n")
        status_line, *header_lines = head.split("\r\n")
        headers = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        answers.append(Answer(int(status_line.split()[1]), headers, body.strip()))
    return answers


def run_walk(base: str, mark: str = WALK_MARK) -> list[Answer]:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed: the README's walk-through is a curl script")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", readme_walk(mark)],
        env={**os.environ, "BASE": base},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        check=False,
    )
    output = done.stdout.decode()  # bytes: text mode would turn the headers' CRLF into LF
    assert done.returncode == 0, f"the walk failed ({done.returncode}):\n{output}\n{done.stderr.decode()}"
    return parse_curl_i(output)


def state(server: Server) -> dict[str, Any]:
    """Everything a client can read: the session list, and each session's resource, events and history."""
    listing = server.get("/sessions", limit=1000).json()
    assert listing["nextCursor"] is None
    sessions = {}
    for item in listing["items"]:
        sid = item["id"]
        sessions[sid] = {
            "session": server.get(f"/sessions/{sid}").json(),
            "events": server.get(f"/sessions/{sid}/events").json(),
            "history": server.get(f"/sessions/{sid}/history").json(),
        }
    return {"order": [item["id"] for item in listing["items"]], "sessions": sessions}


def check_walk_answers(answers: list[Answer]) -> None:
    assert [answer.status for answer in answers] == [201, 201, 201, 200, 201, 409], [a.body for a in answers]
    created, appended, forked, history, opened, refused = answers

    assert created.headers["location"] == "/sessions/demo"
    assert created.json()["id"] == "demo"
    assert created.json()["cwd"] == "/work"
    assert created.json()["eventCount"] == 0

    events = appended.json()["events"]
    assert [event["seq"] for event in events] == [0, 1, 2, 3, 4, 5]
    assert [event["type"] for event in events] == [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ]
    assert all(isinstance(event["time"], int) for event in events)
    appended_session = appended.json()["session"]
    assert appended_session | {"instance": None, "createdAt": None, "bytes": None} == {
        "id": "demo",
        "instance": None,
        "createdAt": None,
        "cwd": "/work",
        "parentSession": None,
        "seedLength": None,
        "origin": None,
        "delegationDepth": 0,
        "agentPreset": None,
        "eventCount": 6,
        "lastEventType": "turn/end",
        "openTurn": None,
        "lastTurnEndSeq": 5,
        "forkable": True,
        "updatedAt": events[-1]["time"],
        "title": None,
        "preview": "Hello",
        "bytes": None,
        "stats": appended_session["stats"] | {"turns": 1, "steps": 1},
        "usage": {},
        "ownUsage": {},
        "archived": False,
    }

    child = forked.json()
    assert forked.headers["location"] == "/sessions/demo-child"
    assert (child["id"], child["parentSession"], child["seedLength"]) == ("demo-child", "demo", 6)
    assert child["cwd"] == "/work"
    assert (child["eventCount"], child["forkable"], child["delegationDepth"]) == (6, True, 0)
    assert child["instance"] != created.json()["instance"]

    assert history.json() == {
        "messages": [
            {"id": "u1", "role": "user", "content": [{"type": "text", "text": "Hello"}], "source": {"kind": "user"}},
            {
                "id": "a1",
                "role": "assistant",
                "content": [{"type": "text", "text": "Hi!"}],
                "source": {"kind": "model", "provider": "deepseek", "model": "deepseek-chat"},
            },
        ],
        "eventCount": 6,
    }

    assert opened.json()["events"][0]["seq"] == 6
    assert opened.json()["session"]["openTurn"] == 2

    assert refused.headers["content-type"] == "application/problem+json"
    problem = refused.json()
    assert problem["code"] == "NOT_AT_TURN_BOUNDARY"
    assert problem["type"] == "urn:forklog:problem:not-at-turn-boundary"
    assert (problem["status"], problem["instance"]) == (409, "/sessions/demo/fork")
    assert (problem["lastEventType"], problem["openTurn"], problem["lastTurnEndSeq"]) == ("turn/start", 2, 5)


def test_readme_walk_then_restart_keeps_every_session(start_server: StartServer, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_server(data_dir, fsync=True)

    check_walk_answers(run_walk(first.base))
    before = state(first)
    assert before["order"] == ["demo", "demo-child"]
    assert first.stop() in GRACEFUL_EXITS

    second = start_server(data_dir, fsync=True)
    assert second.get("/readyz").json() == {"status": "ready", "sessions": 2, "corrupt": []}
    assert state(second) == before
    # The open turn is still open: the agent goes on appending where it stopped.
    step = {"type": "step/start", "data": {"turn": 2, "step": 1}}
    appended = second.post("/sessions/demo/events", {"events": [step]})
    assert appended.status_code == 201, appended.text
    assert appended.json()["events"][0]["seq"] == 7
    assert second.post("/sessions/demo/fork", {"atSeq": 5, "sessionId": "demo-again"}).status_code == 201
    assert second.get("/sessions", parent="demo").json()["items"][1]["id"] == "demo-again"


def test_walk_output_parser_reads_headers_and_bodies() -> None:
    output = (
        'HTTP/1.1 201 Created\r\nlocation: /sessions/a\r\ncontent-type: application/json\r\n\r\n{"id":"a"}\n'
        "HTTP/1.1 204 No Content\r\ndate: x\r\n\r\n\n"
    )
    answers = parse_curl_i(output)
    assert [(a.status, a.headers.get("location"), a.body) for a in answers] == [
        (201, "/sessions/a", '{"id":"a"}'),
        (204, None, ""),
    ]


def test_a_second_process_on_the_same_data_dir_exits_naming_it(server: Server) -> None:
    done = run_app("--port", str(free_port()), "--data-dir", str(server.data_dir), "--no-fsync")
    assert done.returncode != 0
    assert str(server.data_dir) in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert server.get("/readyz").status_code == 200  # the owner serves on


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        pytest.param(["--port", "70000"], {}, "port", id="port-too-large"),
        pytest.param(["--port", "0"], {}, "port", id="port-zero"),
        pytest.param([], {"FORKLOG_PORT": "eighty"}, "port", id="env-port-not-a-number"),
        pytest.param(["--log-level", "loud"], {}, "log_level", id="unknown-log-level"),
    ],
)
def test_bad_settings_exit_non_zero_with_a_clear_message(
    args: list[str], env: dict[str, str], named: str, tmp_path: Path
) -> None:
    done = run_app(*args, "--data-dir", str(tmp_path / "data"), env=env)
    assert done.returncode != 0
    assert "forklog: invalid settings" in done.stderr
    assert named in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()  # refused before touching the disk


def test_a_corrupt_session_is_listed_and_refused_until_repaired(start_server: StartServer, tmp_path: Path) -> None:
    """The README's repair procedure: /readyz names the file, truncating the damaged tail brings the session back."""
    data_dir = tmp_path / "data"
    first = start_server(data_dir, "--compression", "none")  # (the README's repair edits a raw file)
    turn = [
        {"type": "turn/start", "data": {"turn": 1}},
        {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
    ]
    assert first.post("/sessions", {"id": "hurt", "seed": turn}).status_code == 201
    assert first.post("/sessions", {"id": "fine"}).status_code == 201
    first.stop()

    path = data_dir / "sessions" / "hurt.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    path.write_bytes(lines[0] + lines[1] + b'{"type":"turn/e\n')  # a damaged line, not a torn tail

    second = start_server(data_dir)
    ready = second.get("/readyz").json()
    assert ready["sessions"] == 1
    assert [(c["id"], c["path"]) for c in ready["corrupt"]] == [("hurt", str(path))]
    assert "line 3" in ready["corrupt"][0]["reason"]
    refused = second.get("/sessions/hurt")
    assert (refused.status_code, refused.json()["code"]) == (503, "SESSION_CORRUPT")
    assert second.post("/sessions", {"id": "hurt"}).json()["code"] == "SESSION_CORRUPT"
    assert second.get("/sessions/fine").status_code == 200
    second.stop()

    backup = tmp_path / "hurt.jsonl.bak"
    shutil.copy(path, backup)
    path.write_bytes(b"".join(backup.read_bytes().splitlines(keepends=True)[:2]))  # head -n 2

    third = start_server(data_dir)
    assert third.get("/readyz").json() == {"status": "ready", "sessions": 2, "corrupt": []}
    repaired = third.get("/sessions/hurt").json()
    assert (repaired["eventCount"], repaired["openTurn"]) == (1, 1)


def test_readme_tail_prints_the_events_and_the_retried_append_is_replayed(server: Server) -> None:
    """The README's second part: a ``curl -N`` tail in one terminal while the other appends, twice, with one key."""
    check_walk_answers(run_walk(server.base))
    tail = subprocess.Popen(
        ["timeout", "4", "bash", "-euo", "pipefail", "-c", readme_walk("<!-- curl-tail -->")],
        env={**os.environ, "BASE": server.base},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1)  # the tail is connected and has printed turn 2's start
        first, retry = run_walk(server.base, "<!-- curl-retry -->")
        printed, _ = tail.communicate(timeout=10)
    finally:
        if tail.poll() is None:
            tail.kill()
    assert (first.status, retry.status) == (201, 201)
    assert retry.body == first.body and retry.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert [event["seq"] for event in first.json()["events"]] == [7]
    frames = [block for block in printed.decode().split("\n\n") if block.strip()]
    ids = [line[4:] for block in frames for line in block.splitlines() if line.startswith("id: ")]
    assert ids == ["6", "7"], printed.decode()
    assert server.get("/sessions/demo").json()["eventCount"] == 8
