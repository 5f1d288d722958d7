"""Long-poll (spec 7): ``GET /sessions/{id}/events?from=N&waitMs=W`` waits up to W ms for an event at N or after."""

from __future__ import annotations

import asyncio
import time

import pytest
from starlette.testclient import TestClient

from tests.api.builders import note
from tests.api.conftest import AppFactory
from tests.api.helpers import append, assert_invalid_request, assert_problem, create, serve


def test_events_already_there_are_answered_at_once(client: TestClient) -> None:
    create(client, id="s")
    append(client, "s", [note("a"), note("b")])
    started = time.monotonic()
    page = client.get("/sessions/s/events", params={"from": 1, "waitMs": 5000}).json()
    assert time.monotonic() - started < 1
    assert [event["seq"] for event in page["events"]] == [1]
    assert (page["nextSeq"], page["eventCount"]) == (2, 2)


def test_with_nothing_new_the_answer_comes_after_the_wait_and_is_empty(client: TestClient) -> None:
    create(client, id="s")
    append(client, "s", [note("a")])
    started = time.monotonic()
    page = client.get("/sessions/s/events", params={"from": 1, "waitMs": 300}).json()
    waited = time.monotonic() - started
    assert 0.25 <= waited < 2
    assert page == {"events": [], "nextSeq": 1, "eventCount": 1}


def test_an_event_stored_during_the_wait_ends_it(make_app: AppFactory) -> None:
    async def run() -> None:
        async with serve(make_app()) as client:
            await client.post("/sessions", json={"id": "s"})
            started = time.monotonic()
            waiting = asyncio.ensure_future(client.get("/sessions/s/events", params={"from": 0, "waitMs": 10000}))
            await asyncio.sleep(0.1)
            assert not waiting.done()
            await client.post("/sessions/s/events", json={"events": [note("now")]})
            page = (await waiting).json()
            assert time.monotonic() - started < 5
            assert [event["data"]["text"] for event in page["events"]] == ["now"]

    asyncio.run(run())


def test_a_delete_during_the_wait_answers_not_found(make_app: AppFactory) -> None:
    async def run() -> None:
        async with serve(make_app()) as client:
            await client.post("/sessions", json={"id": "s"})
            waiting = asyncio.ensure_future(client.get("/sessions/s/events", params={"waitMs": 10000}))
            await asyncio.sleep(0.1)
            await client.delete("/sessions/s")
            assert_problem(await waiting, 404, "SESSION_NOT_FOUND")

    asyncio.run(run())


@pytest.mark.parametrize("wait", ["-1", "60001", "1.5", "soon", "1e9"])
def test_a_wait_out_of_range_is_an_invalid_request(client: TestClient, wait: str) -> None:
    create(client, id="s")
    assert_invalid_request(client.get("/sessions/s/events", params={"waitMs": wait}), "waitMs")


def test_the_longest_wait_is_accepted(client: TestClient) -> None:
    create(client, id="s")
    append(client, "s", [note("a")])
    assert client.get("/sessions/s/events", params={"waitMs": "60000"}).status_code == 200
