"""GET /healthz and GET /readyz (readiness while recovering is in test_errors.py, NOT_READY)."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.api.builders import turn
from tests.api.conftest import LOCAL, AppFactory, ClientFactory
from tests.api.helpers import append, create, events_of, get_session, wait_ready


def test_healthz_answers_ok(client: TestClient) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"status": "ok"}


def test_readyz_counts_the_live_sessions(client: TestClient) -> None:
    assert client.get("/readyz").json() == {"status": "ready", "sessions": 0, "corrupt": []}

    create(client, id="one")
    create(client, id="two")
    assert client.delete("/sessions/one").status_code == 204

    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"status": "ready", "sessions": 1, "corrupt": []}


def test_a_restarted_service_serves_what_it_acknowledged(make_app: AppFactory, make_client: ClientFactory) -> None:
    with TestClient(make_app(), base_url=LOCAL) as first:
        wait_ready(first)
        created = create(first, id="kept", meta={"cwd": "/work"})
        append(first, "kept", turn(1))
        append(first, "kept", turn(2)[:3])  # turn 2 stays open across the restart
        create(first, id="another")
        before = get_session(first, "kept")
        stored = events_of(first, "kept")
        listed = first.get("/sessions").json()

    second = make_client()  # the same data directory

    assert second.get("/readyz").json() == {"status": "ready", "sessions": 2, "corrupt": []}
    assert second.get("/sessions").json() == listed  # the same sessions, in the same order
    assert get_session(second, "kept") == before
    assert before["instance"] == created["instance"]
    assert before["openTurn"] == 2
    assert events_of(second, "kept") == stored
