"""Retries that never append twice (spec 8): an ``Idempotency-Key`` replays the first answer and changes nothing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.backends.memory import MemoryBackend
from app.domain.clock import wall_clock_ms
from tests.api.builders import note, turn
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import assert_invalid_request, assert_problem, create, events_of, get_session, serve

KEY = {"Idempotency-Key": "retry-7f3a"}


def post(client: TestClient, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
    return client.post(path, json=body, headers={**KEY, **(headers or {})})


def assert_replayed(first: Any, again: Any) -> None:
    assert again.status_code == first.status_code
    assert again.content == first.content
    assert again.headers.get("location") == first.headers.get("location")
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers


def test_a_retried_append_is_stored_once_and_answered_again(client: TestClient) -> None:
    create(client, id="s")
    events = turn(1)  # one body, sent twice (a builder call makes new message ids)
    first = post(client, "/sessions/s/events", {"events": events})
    assert first.status_code == 201
    again = post(client, "/sessions/s/events", {"events": events})
    assert_replayed(first, again)
    assert len(events_of(client, "s")) == len(events)
    assert get_session(client, "s")["eventCount"] == len(events)


def test_a_retried_create_and_fork_change_nothing(client: TestClient) -> None:
    seed = turn(1)
    first = post(client, "/sessions", {"id": "s", "seed": seed})
    assert first.status_code == 201
    assert_replayed(first, post(client, "/sessions", {"id": "s", "seed": seed}))
    generated = client.post("/sessions", json={}, headers={"Idempotency-Key": "make-one"})
    again = client.post("/sessions", json={}, headers={"Idempotency-Key": "make-one"})
    assert_replayed(generated, again)  # the same generated id, not a second session
    fork = client.post("/sessions/s/fork", json={}, headers={"Idempotency-Key": "fork-1"})
    assert fork.status_code == 201
    assert_replayed(fork, client.post("/sessions/s/fork", json={}, headers={"Idempotency-Key": "fork-1"}))
    listed = client.get("/sessions").json()["items"]
    assert len(listed) == 3


def test_the_same_key_with_another_request_is_refused_and_changes_nothing(client: TestClient) -> None:
    create(client, id="s")
    create(client, id="t")
    assert post(client, "/sessions/s/events", {"events": [note("a")]}).status_code == 201
    before = events_of(client, "s")
    assert_problem(post(client, "/sessions/s/events", {"events": [note("b")]}), 422, "IDEMPOTENCY_KEY_REUSED")
    assert_problem(post(client, "/sessions/t/events", {"events": [note("a")]}), 422, "IDEMPOTENCY_KEY_REUSED")
    assert_problem(post(client, "/sessions/s/fork", {}), 422, "IDEMPOTENCY_KEY_REUSED")
    # the body's bytes count: the same events written otherwise are another request
    raw = client.post(
        "/sessions/s/events",
        content=b'{"events":[{"type":"forklog-test/note","data":{"note":"a"}}]}',
        headers={**KEY, "content-type": "application/json"},
    )
    assert_problem(raw, 422, "IDEMPOTENCY_KEY_REUSED")
    assert events_of(client, "s") == before
    assert events_of(client, "t") == []


def test_a_request_that_failed_is_not_remembered(client: TestClient) -> None:
    create(client, id="s")
    refused = post(client, "/sessions/s/events", {"events": [{"type": "turn/end", "data": {"turn": 9}}]})
    assert_problem(refused, 422, "INVALID_EVENT")
    events = turn(1)
    assert post(client, "/sessions/s/events", {"events": events}).status_code == 201  # the key is still free
    assert_problem(post(client, "/sessions/missing/events", {"events": events}), 422, "IDEMPOTENCY_KEY_REUSED")


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("", id="empty"),
        pytest.param("k" * 256, id="256-chars"),
        pytest.param("with space", id="space"),
        pytest.param("tab\there", id="tab"),
        pytest.param("caf\u00e9", id="non-ascii"),
    ],
)
def test_a_malformed_key_is_an_invalid_request(client: TestClient, key: str) -> None:
    create(client, id="s")
    response = client.post(
        "/sessions/s/events",
        json={"events": [note("a")]},
        headers=[(b"Idempotency-Key", key.encode("utf-8"))],
    )
    assert_invalid_request(response, "Idempotency-Key")
    assert events_of(client, "s") == []


def test_the_longest_key_and_every_visible_character_are_accepted(client: TestClient) -> None:
    create(client, id="s")
    for key in ("k" * 255, "".join(chr(code) for code in range(0x21, 0x7F))):
        response = client.post("/sessions/s/events", json={"events": [note(key[:3])]}, headers={"Idempotency-Key": key})
        assert response.status_code == 201, response.text


def test_two_key_headers_are_an_invalid_request(client: TestClient) -> None:
    create(client, id="s")
    response = client.post(
        "/sessions/s/events",
        json={"events": [note("a")]},
        headers=[("Idempotency-Key", "one"), ("Idempotency-Key", "two")],
    )
    assert_invalid_request(response, "Idempotency-Key")


class SlowAppends(MemoryBackend):
    """Appends wait for ``release``: the first request with a key is still running while a retry comes."""

    def __init__(self) -> None:
        super().__init__(clock=wall_clock_ms)
        self.release = asyncio.Event()

    async def append(self, *args: Any, **kwargs: Any) -> None:
        await self.release.wait()
        await super().append(*args, **kwargs)


def test_a_retry_while_the_first_request_runs_is_refused(make_app: AppFactory) -> None:
    backend = SlowAppends()

    async def run() -> None:
        async with serve(make_app(backend=backend)) as client:
            await client.post("/sessions", json={"id": "s"})
            body = {"events": turn(1)}
            first = asyncio.ensure_future(client.post("/sessions/s/events", json=body, headers=KEY))
            await asyncio.sleep(0.05)
            retry = await client.post("/sessions/s/events", json=body, headers=KEY)
            assert_problem(retry, 409, "IDEMPOTENCY_KEY_IN_PROGRESS")
            backend.release.set()
            assert (await first).status_code == 201
            again = await client.post("/sessions/s/events", json=body, headers=KEY)
            assert again.headers["idempotent-replayed"] == "true"
            count = (await client.get("/sessions/s")).json()["eventCount"]
            assert count == len(body["events"])

    asyncio.run(run())


def test_request_syntax_comes_before_readiness_and_readiness_before_the_key(
    make_client: ClientFactory, make_app: AppFactory
) -> None:
    from tests.api.test_errors import SlowRecovery

    slow = SlowRecovery()
    try:
        client = make_client(make_app(backend=slow), ready=False)
        assert_invalid_request(
            client.post("/sessions", json={}, headers={"Idempotency-Key": "bad key"}), "Idempotency-Key"
        )
        assert_problem(client.post("/sessions", json={}, headers=KEY), 503, "NOT_READY")
    finally:
        slow.release.set()


def test_a_kept_key_survives_a_restart_and_still_replays(make_client: ClientFactory) -> None:
    first_client = make_client()
    create(first_client, id="s")
    body = {"events": turn(1)}
    first = post(first_client, "/sessions/s/events", body)
    first_client.__exit__(None, None, None)  # a clean shutdown; tests/e2e covers kill -9
    again = post(make_client(), "/sessions/s/events", body)
    assert_replayed(first, again)


def restarted(running: TestClient, make_client: ClientFactory) -> TestClient:
    """A new app on the same store, once ``running`` shut down cleanly."""
    running.__exit__(None, None, None)
    return make_client()


def test_a_create_deleted_since_replays_after_a_restart_and_is_not_made_again(make_client: ClientFactory) -> None:
    client = make_client()
    body = {"id": "idem1", "seed": turn(1)}
    first = post(client, "/sessions", body)
    assert first.status_code == 201
    assert client.delete("/sessions/idem1").status_code == 204
    client = restarted(client, make_client)
    assert_replayed(first, post(client, "/sessions", body))
    assert client.get("/sessions/idem1").status_code == 404, "the retry made the session again"


def test_a_fork_into_an_id_deleted_since_replays_after_a_restart(make_client: ClientFactory) -> None:
    client = make_client()
    create(client, id="src", seed=turn(1))
    first = post(client, "/sessions/src/fork", {"sessionId": "child"})
    assert first.status_code == 201
    assert client.delete("/sessions/child").status_code == 204
    client = restarted(client, make_client)
    assert_replayed(first, post(client, "/sessions/src/fork", {"sessionId": "child"}))
    assert client.get("/sessions/child").status_code == 404, "the retry forked again"


def test_an_append_to_a_session_deleted_since_replays_its_answer_after_a_restart(make_client: ClientFactory) -> None:
    client = make_client()
    create(client, id="s")
    body = {"events": turn(1)}
    first = post(client, "/sessions/s/events", body)
    assert first.status_code == 201
    assert client.delete("/sessions/s").status_code == 204
    create(client, id="s")  # a new incarnation under the same id: the retry must not append to it either
    client = restarted(client, make_client)
    assert_replayed(first, post(client, "/sessions/s/events", body))
    assert events_of(client, "s") == []


def test_a_create_expired_since_replays_after_a_restart_and_is_not_made_again(make_client: ClientFactory) -> None:
    from tests.api.test_retention import wait_gone

    client = make_client(retention="PT2S")
    body = {"id": "idem1", "seed": turn(1)}
    first = post(client, "/sessions", body)
    assert first.status_code == 201
    wait_gone(client, "idem1", time.monotonic())
    client = restarted(client, make_client)
    assert_replayed(first, post(client, "/sessions", body))
    assert client.get("/sessions/idem1").status_code == 404, "the retry made the session again"
