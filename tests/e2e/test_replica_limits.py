"""Two real ``python -m app`` replicas on one PostgreSQL database under spec 14's limits: a quota's last slot goes
to exactly one of them, and an expired session is deleted once, by one of them."""

from __future__ import annotations

import re
import time

import httpx
import pytest

from app.domain.dsh_records import encode_header
from app.domain.jsonvalue import dumps
from app.domain.session import SessionHeader
from tests.e2e.conftest import StartServer
from tests.e2e.server import Server
from tests.e2e.test_replicas import note, poster, race

pytestmark = pytest.mark.e2e


def replicas(start_server: StartServer, forklog_db: str, *flags: str) -> tuple[Server, Server]:
    return (
        start_server(None, "--database-url", forklog_db, *flags),
        start_server(None, "--database-url", forklog_db, *flags),
    )


def test_replicas_racing_for_the_last_slot_give_it_to_one(start_server: StartServer, forklog_db: str) -> None:
    first, second = replicas(start_server, forklog_db, "--max-sessions", "3")
    assert first.post("/sessions", {"id": "a"}).status_code == 201
    assert second.post("/sessions", {"id": "b"}).status_code == 201

    for round_ in range(5):
        answers = race(
            *(
                poster(server, "/sessions", {"id": f"r{round_}-{n}-{side}"})
                for n in range(4)
                for side, server in enumerate((first, second))
            )
        )
        codes = sorted(answer.status_code for answer in answers)
        assert codes == [201] + [429] * 7, [answer.text for answer in answers]
        for answer in answers:
            if answer.status_code == 429:
                body = answer.json()
                assert (body["code"], body["quota"], body["limit"], body["used"]) == (
                    "QUOTA_EXCEEDED",
                    "sessions",
                    3,
                    3,
                )
        winner = next(answer.json()["id"] for answer in answers if answer.status_code == 201)
        assert len(first.get("/sessions").json()["items"]) == 3
        assert httpx.delete(f"{second.base}/sessions/{winner}", timeout=10.0).status_code == 204  # frees it


def test_replicas_racing_for_the_last_bytes_store_no_more_than_the_quota(
    start_server: StartServer, forklog_db: str
) -> None:
    first, second = replicas(start_server, forklog_db, "--max-bytes", "3000")
    assert first.post("/sessions", {"id": "s"}).status_code == 201
    event = note("x" * 200)
    answers = race(*(poster(server, "/sessions/s/events", {"events": [event]}) for server in (first, second) * 10))
    assert all(answer.status_code in (201, 429) for answer in answers), [answer.text for answer in answers]

    session = second.get("/sessions/s").json()
    header = SessionHeader(id="s", created_at=session["createdAt"], instance=session["instance"])
    lines = [len(dumps(stored)) + 1 for stored in first.get("/sessions/s/events", limit=1000).json()["events"]]
    used = len(encode_header(header)) + sum(lines)
    assert len(lines) == sum(1 for answer in answers if answer.status_code == 201)
    assert used <= 3000 < used + lines[-1]  # never past the quota, and no room was left unused


def test_an_expired_session_is_deleted_once_across_replicas(start_server: StartServer, forklog_db: str) -> None:
    first, second = replicas(start_server, forklog_db, "--retention", "PT2S")
    for n in range(6):
        assert (first, second)[n % 2].post("/sessions", {"id": f"s{n}"}).status_code == 201
    since = time.monotonic()
    # An expired session leaves the lists at once and is deleted by the next sweep: wait for the deletes themselves.
    while any(first.get(f"/sessions/s{n}").status_code != 404 for n in range(6)):
        assert time.monotonic() - since < 12, "the sessions were not deleted within 10 s of expiring"
        time.sleep(0.2)
    for replica in (first, second):
        assert replica.get("/sessions").json()["items"] == []
        assert all(replica.get(f"/sessions/s{n}").status_code == 404 for n in range(6))

    time.sleep(1.5)  # logs are flushed line by line; give a late sweep the time to say anything
    said = [
        int(count) for server in (first, second) for count in re.findall(r"deleted (\d+) sessions", server.output())
    ]
    assert sum(said) == 6  # each session deleted by one replica, once
