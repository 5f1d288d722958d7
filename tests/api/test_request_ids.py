"""Request ids (spec 13): ``X-Request-Id`` on every answer (the client's when well-formed, else a new one), and the
same id as ``requestId`` in the access log line and in every problem body."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.api.builders import note
from tests.api.conftest import ClientFactory
from tests.api.helpers import assert_problem
from tests.api.test_access import write_keys

pytestmark = pytest.mark.files_only


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [json.loads(record.getMessage()) for record in caplog.records if record.name == "forklog.access"]


@pytest.mark.parametrize("offered", ["abc", "a" * 128, "req-1.2:3_x", "0"])
def test_a_well_formed_request_id_is_kept(client: TestClient, offered: str) -> None:
    assert client.post("/sessions", json={"id": "s"}).status_code == 201

    for answer in (
        client.get("/sessions/s", headers={"X-Request-Id": offered}),
        client.post("/sessions/s/events", json={"events": [note("x")]}, headers={"X-Request-Id": offered}),
        client.get("/sessions/missing", headers={"X-Request-Id": offered}),
    ):
        assert answer.headers["x-request-id"] == offered
    assert client.get("/sessions/missing", headers={"X-Request-Id": offered}).json()["requestId"] == offered


@pytest.mark.parametrize("offered", ["", "a" * 129, "has space", "semi;colon", "ünï", "a/b"])
def test_a_malformed_request_id_is_replaced(client: TestClient, offered: str) -> None:
    answer = client.get("/sessions/missing", headers={b"X-Request-Id": offered.encode()})

    made = answer.headers["x-request-id"]
    assert made != offered
    assert len(made) == 32
    assert answer.json()["requestId"] == made


def test_every_answer_has_its_own_id(client: TestClient) -> None:
    answers = [
        client.get("/healthz"),
        client.get("/readyz"),
        client.post("/sessions", json={"id": "s"}),
        client.post("/sessions/s/events", json={"events": [note("x")]}),  # the append shortcut
        client.post("/sessions/s/events", content=b"{"),
        client.get("/nowhere"),
        client.get("/openapi.json"),
        client.get("/ui/"),
        client.get("/metrics"),
        client.get("/sessions/s", headers={"Host": "evil.example"}),
    ]

    ids = [answer.headers.get("x-request-id") for answer in answers]
    assert all(ids) and len(set(ids)) == len(ids)
    for answer in answers:
        if answer.headers["content-type"] == "application/problem+json":
            assert answer.json()["requestId"] == answer.headers["x-request-id"]


def test_refusals_before_any_route_carry_the_id(make_client: ClientFactory, tmp_path: Path) -> None:
    keys = write_keys(tmp_path / "keys.jsonl")
    client = make_client(keys_file=keys.path)

    for answer, status, code in (
        (client.get("/sessions", headers={"X-Request-Id": "r1"}), 401, "UNAUTHENTICATED"),
        (client.post("/sessions", json={}, headers={**keys.auth("read"), "X-Request-Id": "r1"}), 403, "FORBIDDEN"),
    ):
        assert_problem(answer, status, code)
        assert answer.headers["x-request-id"] == "r1"
        assert answer.json()["requestId"] == "r1"


def test_the_access_log_line_carries_the_request_id(client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="forklog.access"):
        first = client.get("/sessions/missing", headers={"X-Request-Id": "trace-me"})
        second = client.post("/sessions", json={"id": "s"})

    lines = access_lines(caplog)
    assert {"requestId": "trace-me", "status": 404}.items() <= lines[-2].items()
    assert lines[-1]["requestId"] == second.headers["x-request-id"]
    assert first.headers["x-request-id"] == "trace-me"
    assert "traceId" not in lines[-1]  # no traceparent, no traces
