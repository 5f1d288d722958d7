"""Two real ``python -m app`` replicas on one PostgreSQL database (spec 6): one order of events, one winner of every
race, and every answer reflecting what the other replica acknowledged."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.server import GRACEFUL_EXITS, Server
from tests.e2e.test_server import check_walk_answers, run_walk, state

pytestmark = pytest.mark.e2e

TURN = [
    {"type": "turn/start", "data": {"turn": 1}},
    {
        "type": "user/message",
        "surfaceOp": "append",
        "data": {"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}},
    },
    {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
]


def note(text: str) -> dict[str, Any]:
    return {"type": "forklog-test/note", "data": {"text": text}}


@pytest.fixture(params=["direct", "pgbouncer"])
def replicas(start_server: StartServer, forklog_db: str, request: pytest.FixtureRequest) -> tuple[Server, Server]:
    """Two replicas on one database: each on its own connection to it, or both through PgBouncer in transaction
    pooling mode (spec 6, A connection pooler), where the change feed polls (no direct URL)."""
    url = forklog_db if request.param == "direct" else request.getfixturevalue("forklog_db_pooled")
    first = start_server(None, "--database-url", url)
    second = start_server(None, "--database-url", url)
    return first, second


def race(*calls: Callable[[], httpx.Response]) -> list[httpx.Response]:
    """The calls at once, each from its own thread, released together."""
    gate = threading.Barrier(len(calls))

    def run(call: Callable[[], httpx.Response]) -> httpx.Response:
        gate.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def poster(server: Server, path: str, body: Any) -> Callable[[], httpx.Response]:
    """A POST to send later (in a race)."""
    return functools.partial(httpx.post, server.base + path, json=body, timeout=30.0)


def events_of(server: Server, session_id: str) -> list[dict[str, Any]]:
    response = server.get(f"/sessions/{session_id}/events", limit=1000)
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["events"]
    return events


def test_appends_through_both_replicas_get_contiguous_distinct_seqs(replicas: tuple[Server, Server]) -> None:
    first, second = replicas
    assert first.post("/sessions", {"id": "s"}).status_code == 201

    def client(number: int) -> list[int]:
        server = replicas[number % 2]
        seqs = []
        with httpx.Client(base_url=server.base, timeout=30.0) as http:
            for round_ in range(15):
                response = http.post("/sessions/s/events", json={"events": [note(f"{number}-{round_}")]})
                assert response.status_code == 201, response.text
                seqs.append(response.json()["events"][0]["seq"])
        return seqs

    with ThreadPoolExecutor(8) as pool:
        acknowledged = [seq for seqs in pool.map(client, range(8)) for seq in seqs]
    assert sorted(acknowledged) == list(range(120))
    for server in replicas:
        events = events_of(server, "s")
        assert [event["seq"] for event in events] == list(range(120))
        assert len({event["data"]["text"] for event in events}) == 120
    assert second.get("/sessions/s").json()["eventCount"] == 120


def test_the_expected_seq_race_has_one_winner(replicas: tuple[Server, Server]) -> None:
    first, second = replicas
    assert first.post("/sessions", {"id": "s"}).status_code == 201
    for round_ in range(10):
        answers = race(
            *(
                poster(server, "/sessions/s/events", {"events": [note(f"{round_}-{number}")], "expectedSeq": round_})
                for number, server in enumerate([first, second, first, second])
            )
        )
        assert sorted(answer.status_code for answer in answers) == [201, 409, 409, 409], [a.text for a in answers]
        assert {answer.json()["code"] for answer in answers if answer.status_code == 409} == {"SEQ_CONFLICT"}
    assert [event["seq"] for event in events_of(second, "s")] == list(range(10))


def test_a_create_race_for_one_id_has_one_winner(replicas: tuple[Server, Server]) -> None:
    first, second = replicas
    for round_ in range(10):
        answers = race(
            poster(first, "/sessions", {"id": f"s{round_}", "seed": TURN}),
            poster(second, "/sessions", {"id": f"s{round_}"}),
        )
        assert sorted(answer.status_code for answer in answers) == [201, 409]
        loser = next(answer for answer in answers if answer.status_code == 409)
        assert loser.json()["code"] == "SESSION_ALREADY_EXISTS"
        winner = next(answer for answer in answers if answer.status_code == 201).json()
        assert first.get(f"/sessions/s{round_}").json()["instance"] == winner["instance"]


def test_a_fork_race_for_one_child_id_has_one_winner(replicas: tuple[Server, Server]) -> None:
    first, second = replicas
    assert first.post("/sessions", {"id": "src", "seed": TURN}).status_code == 201
    for round_ in range(10):
        answers = race(*(poster(server, "/sessions/src/fork", {"sessionId": f"kid{round_}"}) for server in replicas))
        assert sorted(answer.status_code for answer in answers) == [201, 409]
    listed = second.get("/sessions", parent="src", limit=100).json()["items"]
    assert sorted(session["id"] for session in listed) == [f"kid{round_}" for round_ in range(10)]


def test_a_fork_through_one_replica_reads_the_same_through_the_other(replicas: tuple[Server, Server]) -> None:
    first, second = replicas
    assert first.post("/sessions", {"id": "src", "seed": TURN}).status_code == 201
    opened = {"type": "turn/start", "data": {"turn": 2}}
    assert second.post("/sessions/src/events", {"events": [opened, note("x")]}).status_code == 201
    forked = first.post("/sessions/src/fork", {"sessionId": "kid", "atSeq": 2})
    assert forked.status_code == 201, forked.text
    assert events_of(second, "kid") == events_of(first, "src")[:3]
    kid_history = second.get("/sessions/kid/history").json()
    assert kid_history["messages"] == first.get("/sessions/src/history", atSeq=2).json()["messages"]
    # The child grows through the other replica, from the seed's end.
    assert second.post("/sessions/kid/events", {"events": [opened]}).status_code == 201
    assert [event["seq"] for event in events_of(first, "kid")] == [0, 1, 2, 3]


def test_a_delete_through_one_replica_is_seen_at_once_through_the_other(replicas: tuple[Server, Server]) -> None:
    first, second = replicas
    assert first.post("/sessions", {"id": "s", "seed": TURN}).status_code == 201
    assert second.get("/sessions/s").status_code == 200
    assert second.post("/sessions/s/events", {"events": [note("a")]}).status_code == 201  # caches its tip
    assert httpx.delete(f"{first.base}/sessions/s", timeout=10.0).status_code == 204
    assert second.get("/sessions/s").status_code == 404
    assert second.post("/sessions/s/events", {"events": [note("b")]}).status_code == 404
    assert second.post("/sessions", {"id": "s"}).status_code == 201
    assert first.get("/sessions/s").json()["eventCount"] == 0


def test_the_readme_walk_on_postgresql_reads_the_same_through_the_other_replica_and_after_a_restart(
    replicas: tuple[Server, Server], start_server: StartServer, forklog_db: str
) -> None:
    first, second = replicas
    check_walk_answers(run_walk(first.base))
    seen = state(first)
    assert seen["order"] == ["demo", "demo-child"]
    assert state(second) == seen
    assert first.stop() in GRACEFUL_EXITS
    assert second.stop() in GRACEFUL_EXITS
    again = start_server(None, "--database-url", forklog_db)
    assert again.get("/readyz").json() == {"status": "ready", "sessions": 2, "corrupt": []}
    assert state(again) == seen
