"""Without keys the service serves only its own machine (spec 9, "Loopback without keys").

A page on another site must not drive it from the user's browser: a foreign ``Host`` (DNS rebinding) is refused on
every route, and a change carrying a foreign ``Origin`` is refused before it runs, even as a "simple" request (an
empty or ``text/plain`` body needs no preflight).
"""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.api.builders import turn
from tests.api.conftest import ClientFactory
from tests.api.helpers import append, assert_problem, create

EVIL = "http://evil.example"

# Every route, as (method, path, body): the changes first.
Route = tuple[str, str, str | None]
CHANGES: list[Route] = [
    ("POST", "/sessions", None),
    ("POST", "/sessions/s/events", '{"events": [{"type": "note", "data": null}]}'),
    ("POST", "/sessions/s/fork", None),
    ("DELETE", "/sessions/s", None),
]
READS: list[Route] = [
    ("GET", "/sessions", None),
    ("GET", "/sessions/s", None),
    ("GET", "/sessions/s/events", None),
    ("GET", "/sessions/s/history", None),
    ("POST", "/sessions/s/snapshot", None),
    ("GET", "/healthz", None),
    ("GET", "/readyz", None),
]


@pytest.fixture
def filled(client: TestClient) -> TestClient:
    create(client, id="s")
    append(client, "s", turn(1))
    return client


def snapshot_of_store(client: TestClient) -> object:
    listed = client.get("/sessions").json()["items"]
    return [(item["id"], item["eventCount"]) for item in listed]


@pytest.mark.parametrize(("method", "path", "body"), CHANGES + READS)
@pytest.mark.parametrize(
    "host", ["attacker.example", "attacker.example:8000", "127.0.0.1.attacker.example", "localhost.evil", ""]
)
def test_a_foreign_host_is_refused_on_every_route(
    filled: TestClient, method: str, path: str, body: str | None, host: str
) -> None:
    before = snapshot_of_store(filled)
    response = filled.request(method, path, content=body, headers={"Host": host, "Content-Type": "text/plain"})
    problem = assert_problem(response, 400, "INVALID_REQUEST")
    assert problem["errors"][0]["field"] == "Host"
    assert snapshot_of_store(filled) == before


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8000", "127.0.0.1:8000", "127.9.9.9", "[::1]:8000", "app.localhost:8000"]
)
def test_loopback_hosts_are_served(filled: TestClient, host: str) -> None:
    assert filled.get("/sessions/s", headers={"Host": host}).status_code == 200


def test_configured_hosts_are_served_too(make_client: ClientFactory) -> None:
    client = make_client(allowed_hosts=["forklog.internal", "*.example.org"])
    assert client.get("/healthz", headers={"Host": "forklog.internal:8000"}).status_code == 200
    assert client.get("/healthz", headers={"Host": "a.example.org"}).status_code == 200
    assert_problem(client.get("/healthz", headers={"Host": "example.org"}), 400, "INVALID_REQUEST")


@pytest.mark.parametrize(("method", "path", "body"), CHANGES)
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_cross_site_change_is_refused_before_it_runs(
    filled: TestClient, method: str, path: str, body: str | None, content_type: str | None
) -> None:
    before = snapshot_of_store(filled)
    headers = {"Origin": EVIL, **({"Content-Type": content_type} if content_type else {})}
    response = filled.request(method, path, content=body, headers=headers)
    assert_problem(response, 403, "FORBIDDEN")
    assert snapshot_of_store(filled) == before


@pytest.mark.parametrize(("method", "path", "body"), READS)
def test_a_cross_site_read_is_answered(filled: TestClient, method: str, path: str, body: str | None) -> None:
    # The browser keeps the answer from the page (no CORS headers); refusing would only break tools that send Origin.
    response = filled.request(method, path, content=body, headers={"Origin": EVIL})
    assert response.status_code == 200


def test_the_services_own_pages_may_change_sessions(make_client: ClientFactory) -> None:
    # The session browser (/ui/) is served by this very service: its fetches carry the service's own origin.
    client = make_client()
    response = client.post("/sessions", json={"id": "mine"}, headers={"Origin": "http://localhost"})
    assert response.status_code == 201, response.text
    for other in ("http://localhost:8001", "https://localhost", "http://127.0.0.1", "null"):
        response = client.post("/sessions", json={"id": "theirs"}, headers={"Origin": other})
        assert_problem(response, 403, "FORBIDDEN")


def test_an_allowed_origin_may_change_sessions(make_client: ClientFactory) -> None:
    client = make_client(cors_origins=["http://app.example:3000"])
    response = client.post("/sessions", json={"id": "mine"}, headers={"Origin": "http://app.example:3000"})
    assert response.status_code == 201, response.text
    response = client.post("/sessions", json={"id": "theirs"}, headers={"Origin": "http://app.example:3001"})
    assert_problem(response, 403, "FORBIDDEN")
