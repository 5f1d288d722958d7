"""PostgreSQL faults under a real ``python -m app`` (spec 6): the database stopped and started again under load, a
replica killed in the middle of appends and forks, a database that is not there yet, one that is too new. Nothing
acknowledged is ever lost, and nothing but ``503 STORAGE_UNAVAILABLE`` is answered meanwhile."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from app.backends.postgres.schema import SCHEMA_VERSION
from tests.e2e.conftest import StartServer
from tests.e2e.server import REPO, Server, free_port, run_app
from tests.support.postgres import PostgresCluster

pytestmark = pytest.mark.e2e

PASSWORD = "s3cret-never-shown"


def note(text: str) -> dict[str, Any]:
    return {"type": "forklog-test/note", "data": {"text": text}}


def whole_turn(number: int) -> list[dict[str, Any]]:
    return [
        {"type": "turn/start", "data": {"turn": number}},
        note(f"turn {number}"),
        {"type": "turn/end", "data": {"turn": number, "reason": {"kind": "completed"}}},
    ]


def with_password(url: str) -> str:
    """The URL with a password (the test cluster trusts loopback, so any password is accepted)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{PASSWORD}@{parts.hostname}:{parts.port}"))


def all_events(server: Server, session_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        response = server.get(f"/sessions/{session_id}/events", limit=1000, **{"from": len(events)})
        assert response.status_code == 200, response.text
        page = response.json()
        events.extend(page["events"])
        if len(events) >= page["eventCount"]:
            return events


@dataclass
class Load:
    """Clients appending to their own session each, recording what was acknowledged and anything unexpected."""

    server: Server
    sessions: list[str]
    acknowledged: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    unavailable: int = 0
    unexpected: list[Any] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for session in self.sessions:
            self.acknowledged[session] = []
            thread = threading.Thread(target=self._client, args=(session,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _client(self, session: str) -> None:
        with httpx.Client(base_url=self.server.base, timeout=30.0) as http:
            number = 0
            while not self.stop.is_set():
                text = f"{session}-{number}"
                number += 1
                try:
                    response = http.post(f"/sessions/{session}/events", json={"events": [note(text)]})
                except httpx.TransportError as exc:
                    with self.lock:
                        self.unexpected.append(repr(exc))
                    continue
                with self.lock:
                    if response.status_code == 201:
                        self.acknowledged[session].append((response.json()["events"][0]["seq"], text))
                    elif response.status_code == 503 and response.json().get("code") == "STORAGE_UNAVAILABLE":
                        self.unavailable += 1
                    else:
                        self.unexpected.append((response.status_code, response.text))
                time.sleep(0.002)

    def counts(self) -> list[int]:
        with self.lock:
            return [len(self.acknowledged[session]) for session in self.sessions]

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def wait_for(condition: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_database_restart_under_load_loses_nothing_acknowledged(
    start_server: StartServer, forklog_db: str, pg_cluster: PostgresCluster
) -> None:
    server = start_server(None, "--database-url", forklog_db)
    sessions = [f"s{number}" for number in range(4)]
    for session in sessions:
        assert server.post("/sessions", {"id": session}).status_code == 201
    load = Load(server, sessions)
    load.start()
    try:
        wait_for(lambda: min(load.counts()) >= 20, 20, "appends before the outage")
        pg_cluster.stop("immediate")
        time.sleep(1.5)
        readyz = server.get("/readyz")
        assert (readyz.status_code, readyz.json()["code"]) == (503, "NOT_READY")
        assert server.get("/healthz").status_code == 200
        during = load.counts()
        pg_cluster.start()
        wait_for(lambda: all(now > then for now, then in zip(load.counts(), during, strict=True)), 30, "serving again")
        assert server.get("/readyz").status_code == 200
    finally:
        load.finish()
    assert load.unexpected == []
    assert load.unavailable > 0
    for session in sessions:
        stored = all_events(server, session)
        assert [event["seq"] for event in stored] == list(range(len(stored)))
        for seq, text in load.acknowledged[session]:
            assert stored[seq]["data"]["text"] == text


def test_a_replica_killed_during_appends_and_forks_loses_nothing_acknowledged(
    start_server: StartServer, forklog_db: str
) -> None:
    victim = start_server(None, "--database-url", forklog_db)
    survivor = start_server(None, "--database-url", forklog_db)
    assert victim.post("/sessions", {"id": "src", "seed": whole_turn(1)}).status_code == 201
    appended: list[tuple[int, int]] = []  # (first seq, turn number) of each acknowledged append
    forked: list[tuple[str, int]] = []  # (child id, seed length) of each acknowledged fork
    stop = threading.Event()

    def appends() -> None:
        turn = 2
        with httpx.Client(base_url=victim.base, timeout=30.0) as http:
            while not stop.is_set():
                try:
                    response = http.post("/sessions/src/events", json={"events": whole_turn(turn)})
                except httpx.TransportError:
                    return  # the replica is gone
                if response.status_code == 201:
                    appended.append((response.json()["events"][0]["seq"], turn))
                    turn += 1

    def forks() -> None:
        number = 0
        with httpx.Client(base_url=victim.base, timeout=30.0) as http:
            while not stop.is_set():
                try:
                    response = http.post("/sessions/src/fork", json={"sessionId": f"kid{number}"})
                except httpx.TransportError:
                    return
                if response.status_code == 201:
                    forked.append((f"kid{number}", response.json()["seedLength"]))
                number += 1

    workers = [threading.Thread(target=appends, daemon=True), threading.Thread(target=forks, daemon=True)]
    for worker in workers:
        worker.start()
    wait_for(lambda: len(appended) >= 20 and len(forked) >= 10, 30, "appends and forks")
    victim.kill()  # SIGKILL, in the middle of whatever it was doing
    stop.set()
    for worker in workers:
        worker.join(timeout=30)

    source = all_events(survivor, "src")
    for first_seq, turn in appended:
        assert source[first_seq]["data"] == {"turn": turn}
        assert source[first_seq + 1]["data"] == {"text": f"turn {turn}"}
    for child, seed_length in forked:
        assert all_events(survivor, child) == source[:seed_length]
    # The survivor goes on where the victim left off.
    next_turn = len(source) // 3 + 1
    assert survivor.post("/sessions/src/events", {"events": whole_turn(next_turn)}).status_code == 201


def spawn(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], int, Path]:
    """``python -m app`` on a free port, not waited for (its store may not be reachable)."""
    port = free_port()
    log = tmp_path / f"server-{port}.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "--port", str(port), "--data-dir", str(tmp_path / "unused"), *args],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    return process, port, log


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


def test_a_database_that_is_not_up_yet_is_waited_for_and_the_password_never_shows(
    tmp_path: Path, forklog_db: str, pg_cluster: PostgresCluster, spawned: list[subprocess.Popen[bytes]]
) -> None:
    pg_cluster.stop("fast")
    process, port, log = spawn(tmp_path, "--database-url", with_password(forklog_db), "--log-level", "debug")
    spawned.append(process)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=2.0).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(healthy, 20, "the port to open")
    readyz = httpx.get(f"{base}/readyz", timeout=5.0)
    assert (readyz.status_code, readyz.json()["code"]) == (503, "NOT_READY")
    created = httpx.post(f"{base}/sessions", json={"id": "s"}, timeout=10.0)
    assert (created.status_code, created.json()["code"]) == (503, "NOT_READY")
    pg_cluster.start()
    wait_for(lambda: httpx.get(f"{base}/readyz", timeout=5.0).status_code == 200, 20, "readiness")
    assert httpx.post(f"{base}/sessions", json={"id": "s"}, timeout=10.0).status_code == 201
    output = log.read_text(errors="replace")
    assert "not reachable yet" in output
    assert PASSWORD not in output


def test_a_bad_database_url_is_refused_without_showing_it() -> None:
    result = run_app("--database-url", f"mysql://user:{PASSWORD}@db.example/forklog")
    assert result.returncode != 0
    assert "database_url" in result.stderr and "postgresql://" in result.stderr
    assert PASSWORD not in result.stderr + result.stdout


def test_a_database_with_a_newer_schema_refuses_to_start_naming_both_versions(forklog_db: str) -> None:
    async def bump() -> None:
        conn = await asyncpg.connect(forklog_db)
        try:
            await conn.execute("UPDATE forklog_schema SET version = $1", SCHEMA_VERSION + 41)
        finally:
            await conn.close()

    asyncio.run(bump())
    # The environment variable selects PostgreSQL as the flag does.
    result = run_app("--port", str(free_port()), env={"FORKLOG_DATABASE_URL": with_password(forklog_db)})
    assert result.returncode != 0
    assert f"version {SCHEMA_VERSION + 41}" in result.stderr
    assert f"version {SCHEMA_VERSION}" in result.stderr
    assert PASSWORD not in result.stderr + result.stdout
