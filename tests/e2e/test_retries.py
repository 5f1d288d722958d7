"""Retries across a crash (spec 8): a change acknowledged just before a kill -9 keeps its key, so its retry after the
restart is answered from the record and changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import StartServer

pytestmark = pytest.mark.e2e


def note(text: str) -> dict[str, Any]:
    return {"type": "forklog-test/note", "data": {"text": text}}


def test_a_retry_after_kill_9_replays_the_acknowledged_answer(start_server: StartServer, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_server(data_dir, fsync=True)
    turn = [
        {"type": "turn/start", "data": {"turn": 1}},
        {"type": "turn/end", "data": {"turn": 1, "reason": {"kind": "completed"}}},
    ]
    requests = [
        ("/sessions", {"id": "s", "seed": turn}, "create-s"),
        ("/sessions/s/fork", {"sessionId": "kid"}, "fork-1"),
        ("/sessions/s/events", {"events": [note("once")]}, "append-1"),
        ("/sessions/s/events", {"events": [note("twice?")]}, "append-2"),
    ]
    answers = []
    with httpx.Client(base_url=first.base, timeout=10) as client:
        for path, body, key in requests:
            answer = client.post(path, json=body, headers={"Idempotency-Key": key})
            assert answer.status_code == 201, answer.text
            answers.append(answer)
    first.kill()  # SIGKILL right after the last acknowledgement: no clean shutdown

    second = start_server(data_dir, fsync=True)
    with httpx.Client(base_url=second.base, timeout=10) as client:
        for (path, body, key), answer in zip(requests, answers, strict=True):
            again = client.post(path, json=body, headers={"Idempotency-Key": key})
            assert again.status_code == answer.status_code
            assert again.content == answer.content
            assert again.headers.get("location") == answer.headers.get("location")
            assert again.headers["idempotent-replayed"] == "true"
        events = client.get("/sessions/s/events").json()["events"]
        assert [event.get("data", {}).get("text") for event in events[2:]] == ["once", "twice?"]
        assert len(events) == 4
        assert client.get("/sessions/kid").json()["eventCount"] == 2
        assert len(client.get("/sessions").json()["items"]) == 2


def test_a_retry_after_a_delete_and_kill_9_replays_and_makes_nothing(start_server: StartServer, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_server(data_dir, fsync=True)
    with httpx.Client(base_url=first.base, timeout=10) as client:
        made = client.post("/sessions", json={"id": "idem1"}, headers={"Idempotency-Key": "c1"})
        assert made.status_code == 201, made.text
        assert client.delete("/sessions/idem1").status_code == 204
    first.kill()  # right after the delete's acknowledgement

    second = start_server(data_dir, fsync=True)
    with httpx.Client(base_url=second.base, timeout=10) as client:
        again = client.post("/sessions", json={"id": "idem1"}, headers={"Idempotency-Key": "c1"})
        assert (again.status_code, again.content) == (made.status_code, made.content)
        assert again.headers["idempotent-replayed"] == "true"
        assert client.get("/sessions/idem1").status_code == 404
