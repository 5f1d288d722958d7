"""What the HTTP tests do again and again: wait for readiness, check a problem answer, create and fill a session."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
from fastapi import FastAPI
from starlette.testclient import TestClient

from tests.api.builders import Event

PROBLEM_JSON = "application/problem+json"
READY_TIMEOUT = 10.0
SESSION_FIELDS = {
    "id",
    "instance",
    "createdAt",
    "cwd",
    "parentSession",
    "seedLength",
    "origin",
    "delegationDepth",
    "agentPreset",
    "archived",
    "eventCount",
    "lastEventType",
    "openTurn",
    "lastTurnEndSeq",
    "forkable",
    "updatedAt",
    "title",
    "preview",
    "bytes",
    "stats",
    "usage",
    "ownUsage",
}
# The stats of a log without steps (spec 17).
NO_STATS = {
    "turns": 0,
    "steps": 0,
    "llmMs": 0,
    "toolMs": 0,
    "ttftMs": 0,
    "ttftSteps": 0,
    "decodeMs": 0,
    "decodeTokens": 0,
}
GENERATED_ID = re.compile(r"session-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def wait_ready(client: TestClient) -> None:
    """Poll ``/readyz`` until the store has recovered (it answers 503 NOT_READY until then)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        response = client.get("/readyz")
        if response.status_code == 200:
            return
        assert_problem(response, 503, "NOT_READY")
        assert time.monotonic() < deadline, "the service did not become ready"
        time.sleep(0.005)


Response = httpx.Response | httpx2.Response


@asynccontextmanager
async def serve(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """An async client of ``app``, started and ready, inside the running event loop.

    Unlike the TestClient (whose portal runs one request at a time) every request runs concurrently on this loop,
    as under a real server; and the request path is decoded once, as a server decodes it.
    """
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            deadline = time.monotonic() + READY_TIMEOUT
            while (await client.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, "the service did not become ready"
                await asyncio.sleep(0.005)
            yield client


def assert_problem(
    response: Response, status: int, code: str, *, instance: str | None = None, **facts: Any
) -> dict[str, Any]:
    """Check an RFC 9457 problem answer and return its body.

    ``instance`` defaults to the decoded path of the request; each of ``facts`` must be in the body as given.
    """
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_JSON
    body: dict[str, Any] = response.json()
    assert body["code"] == code, body
    assert body["status"] == status
    assert urlsplit(body["type"]).scheme, f"type {body['type']!r} is not a URI"
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str) and body["detail"]
    expected_instance = response.request.url.path if instance is None else instance
    assert body["instance"] == expected_instance, body
    if code == "INVALID_REQUEST":
        errors = body["errors"]
        assert isinstance(errors, list) and errors, body
        for error in errors:
            assert set(error) == {"field", "reason"}
            assert isinstance(error["field"], str) and isinstance(error["reason"], str) and error["reason"]
    for name, value in facts.items():
        assert name in body, f"the problem lacks {name!r}: {body}"
        assert body[name] == value, f"{name}: {body[name]!r} != {value!r}"
    return body


def assert_invalid_request(response: Response, field: str, *, instance: str | None = None) -> dict[str, Any]:
    """A 422 INVALID_REQUEST whose ``errors`` name ``field``."""
    body = assert_problem(response, 422, "INVALID_REQUEST", instance=instance)
    fields = [error["field"] for error in body["errors"]]
    assert field in fields, f"errors name {fields}, not {field!r}"
    return body


def create(client: TestClient, **body: Any) -> dict[str, Any]:
    """``POST /sessions`` with ``body``; the created Session."""
    response = client.post("/sessions", json=body)
    assert response.status_code == 201, response.text
    session: dict[str, Any] = response.json()
    return session


def append(client: TestClient, session_id: str, events: list[Event], **members: Any) -> dict[str, Any]:
    """``POST /sessions/{id}/events``; the answer ``{events, session}``."""
    response = client.post(f"/sessions/{session_id}/events", json={"events": events, **members})
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


def get_session(client: TestClient, session_id: str) -> dict[str, Any]:
    response = client.get(f"/sessions/{session_id}")
    assert response.status_code == 200, response.text
    session: dict[str, Any] = response.json()
    return session


def events_of(client: TestClient, session_id: str) -> list[dict[str, Any]]:
    """Every stored event of the session."""
    response = client.get(f"/sessions/{session_id}/events", params={"limit": 10000})
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["events"]
    return events


def history_of(client: TestClient, session_id: str, **params: Any) -> list[Any]:
    response = client.get(f"/sessions/{session_id}/history", params=params)
    assert response.status_code == 200, response.text
    messages: list[Any] = response.json()["messages"]
    return messages


def fork(client: TestClient, session_id: str, **body: Any) -> dict[str, Any]:
    response = client.post(f"/sessions/{session_id}/fork", json=body)
    assert response.status_code == 201, response.text
    child: dict[str, Any] = response.json()
    return child


def listed_pages(client: TestClient, **params: Any) -> list[list[str]]:
    """The session ids of every page ``GET /sessions`` gives for ``params``, following ``nextCursor`` to the end."""
    pages: list[list[str]] = []
    cursor = None
    while True:
        query = dict(params) if cursor is None else {**params, "cursor": cursor}
        response = client.get("/sessions", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append([item["id"] for item in body["items"]])
        cursor = body["nextCursor"]
        if cursor is None:
            return pages
        assert isinstance(cursor, str)
        assert len(pages) < 100, "the cursor does not advance"


def listed_ids(client: TestClient, **params: Any) -> list[str]:
    """The session ids of every page ``GET /sessions`` gives for ``params``, in order."""
    return [id for page in listed_pages(client, **params) for id in page]


def listed_page(client: TestClient, **params: Any) -> list[str]:
    """The session ids on the one page ``GET /sessions`` gives for ``params``."""
    response = client.get("/sessions", params=params)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


def searched(client: TestClient, q: str, **params: Any) -> list[dict[str, Any]]:
    """The items of the one page a search for ``q`` gives."""
    response = client.get("/sessions", params={"q": q, **params})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def a_later_millisecond() -> None:
    """Wait until the clock is past every time given so far (createdAt, updatedAt and events' times order by it)."""
    time.sleep(0.02)
