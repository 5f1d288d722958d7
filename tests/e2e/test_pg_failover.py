"""Failover (spec 6): a primary and a synchronous standby, two forklog processes on the multi-host URL, appends with
Idempotency-Keys retried through the loss of the primary and the promotion of the standby. Every acknowledged event
is stored exactly once, seqs stay contiguous, nothing but ``503 STORAGE_UNAVAILABLE`` is answered meanwhile, and
both processes serve from the new primary within 5 s of the promotion, without a restart."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.server import Server
from tests.support.postgres import find_server_bindir
from tests.support.replication import ReplicatedPair

pytestmark = pytest.mark.e2e

LARGE_TURNS = 2_000  # the forked session: 6,000 events
BACK_WITHIN = 5.0  # seconds after the promotion (spec 6)
CLIENTS = 4
RETRY_FOR = 30.0  # seconds a client retries one request before it gives up


@pytest.fixture
def pair() -> Iterator[ReplicatedPair]:
    if find_server_bindir() is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup)")
    replicated = ReplicatedPair()
    try:
        yield replicated.start()
    finally:
        replicated.close()


def note(text: str) -> dict[str, Any]:
    return {"type": "forklog-test/note", "data": {"text": text}}


@dataclass
class Load:
    """Clients that append to their own session each, through both servers in turn, every request with its own
    Idempotency-Key and retried with it until acknowledged."""

    servers: list[Server]
    acknowledged: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    forked: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    unavailable: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, sessions: list[str]) -> None:
        for session in sessions:
            self.acknowledged[session] = []
            thread = threading.Thread(target=self._client, args=(session,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=RETRY_FOR + 15)

    def send(self, client: httpx.Client, path: str, body: Any, key: str, turn: Iterator[int]) -> httpx.Response | None:
        """POST until a 2xx (retrying the same key, on the next server each time), or None after RETRY_FOR."""
        deadline = time.monotonic() + RETRY_FOR
        while time.monotonic() < deadline:
            server = self.servers[next(turn) % len(self.servers)]
            try:
                response = client.post(server.base + path, json=body, headers={"Idempotency-Key": key})
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            if response.is_success:
                return response
            if response.status_code == 503 and response.json().get("code") == "STORAGE_UNAVAILABLE":
                with self.lock:
                    self.unavailable += 1
                time.sleep(0.05)
                continue
            with self.lock:
                self.unexpected.append(f"{path} {key}: {response.status_code} {response.text}")
            return None
        with self.lock:
            self.unexpected.append(f"{path} {key}: not acknowledged within {RETRY_FOR} s")
        return None

    def fork_repeatedly(self, source: str) -> None:
        thread = threading.Thread(target=self._forker, args=(source,), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _forker(self, source: str) -> None:
        turn = itertools.count()
        with httpx.Client(timeout=15.0) as client:
            for number in itertools.count():
                if self.stop.is_set():
                    return
                child = f"child-{number}"
                answer = self.send(client, f"/sessions/{source}/fork", {"sessionId": child}, child, turn)
                if answer is None:
                    return
                with self.lock:
                    self.forked.append(child)

    def _client(self, session: str) -> None:
        turn = itertools.count()
        with httpx.Client(timeout=15.0) as client:
            for number in itertools.count():
                if self.stop.is_set():
                    return
                text = f"{session}-{number}"
                answer = self.send(client, f"/sessions/{session}/events", {"events": [note(text)]}, text, turn)
                if answer is None:
                    return
                with self.lock:
                    self.acknowledged[session].append((answer.json()["events"][0]["seq"], text))


def back_after(server: Server, session: str, promoted_at: float) -> float:
    """Seconds from the promotion to the first change ``server`` acknowledges (retried with one key)."""
    key = f"probe-{server.port}-{promoted_at}"
    with httpx.Client(timeout=10.0) as client:
        while time.monotonic() - promoted_at < 30:
            try:
                response = client.post(
                    f"{server.base}/sessions/{session}/events",
                    json={"events": [note(key)]},
                    headers={"Idempotency-Key": key},
                )
                if response.is_success:
                    return time.monotonic() - promoted_at
                assert response.status_code == 503, response.text
            except httpx.TransportError:
                pass
            time.sleep(0.05)
    return float("inf")


def children_of(server: Server, session: str) -> list[str]:
    found: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"parent": session, "limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = server.get("/sessions", **params).json()
        found.extend(item["id"] for item in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            return found


def all_events(server: Server, session: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        response = server.get(f"/sessions/{session}/events", limit=1000, **{"from": len(events)})
        assert response.status_code == 200, response.text
        page = response.json()
        events.extend(page["events"])
        if len(events) >= page["eventCount"]:
            return events


def whole_turn(number: int, first_time: int) -> list[dict[str, Any]]:
    return [
        {"type": "turn/start", "data": {"turn": number}, "time": first_time},
        {**note(f"turn {number}"), "time": first_time + 1},
        {"type": "turn/end", "data": {"turn": number, "reason": {"kind": "completed"}}, "time": first_time + 2},
    ]


def failover(pair: ReplicatedPair, start_server: StartServer, lose_primary: Callable[[], None]) -> None:
    url = pair.url()
    servers = [start_server(None, "--database-url", url) for _ in range(2)]
    sessions = [f"load-{index}" for index in range(CLIENTS)]
    probes = [f"probe-{index}" for index in range(len(servers))]
    for session in sessions + probes:
        assert servers[0].post("/sessions", {"id": session}).status_code == 201
    seed = [event for number in range(LARGE_TURNS) for event in whole_turn(number + 1, 1_700_000_000_000 + 3 * number)]
    large = httpx.post(f"{servers[0].base}/sessions", json={"id": "large", "seed": seed}, timeout=60.0)
    assert large.status_code == 201, large.text
    load = Load(servers)
    load.start(sessions)
    load.fork_repeatedly("large")
    time.sleep(2.0)

    lose_primary()
    time.sleep(2.0)  # the HA manager makes sure the primary is lost before it promotes (Patroni: ttl, 30 s)
    pair.standby.promote()
    promoted_at = time.monotonic()
    back = [back_after(server, probe, promoted_at) for server, probe in zip(servers, probes, strict=True)]
    time.sleep(2.0)  # the load runs on the new primary a while
    load.finish()

    print(f"back after the promotion: {back} s; 503s meanwhile: {load.unavailable}; forks: {len(load.forked)}")
    assert not load.unexpected, load.unexpected[:5]
    assert all(seconds <= BACK_WITHIN for seconds in back), f"back after the promotion: {back} s"
    assert load.forked, "no fork acknowledged"
    for child in load.forked:  # each acknowledged once, by its key: a retry never made a second child or a 409
        for server in servers:
            made = server.get(f"/sessions/{child}")
            assert made.status_code == 200, made.text
            assert (made.json()["parentSession"], made.json()["seedLength"]) == ("large", len(seed))
    assert sorted(children_of(servers[1], "large")) == sorted(load.forked), "a fork made and not acknowledged"
    for session in sessions:
        acknowledged = load.acknowledged[session]
        assert acknowledged, f"{session}: nothing acknowledged"
        for server in servers:
            events = all_events(server, session)
            assert [event["seq"] for event in events] == list(range(len(events)))
            texts = [event["data"]["text"] for event in events]
            assert len(texts) == len(set(texts)), f"{session}: an event stored twice"
            for seq, text in acknowledged:
                assert texts[seq] == text, f"{session}: acknowledged {text} at {seq}, stored {texts[seq : seq + 1]}"


def test_a_killed_primary_fails_over_to_the_promoted_standby(pair: ReplicatedPair, start_server: StartServer) -> None:
    failover(pair, start_server, pair.kill_primary)


def test_a_paused_primary_fails_over_to_the_promoted_standby(pair: ReplicatedPair, start_server: StartServer) -> None:
    failover(pair, start_server, pair.pause_primary)
