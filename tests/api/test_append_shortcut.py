"""Appends skip FastAPI's layers and the router (app/api/fast_path/append_shortcut.py, ForklogApp in app/api/app.py):
they must answer exactly as the documented route does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.routing import Router
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.fast_path.append_shortcut import AppendShortcut
from app.api.settings import Settings
from tests.api.builders import close_turn, note, open_turn
from tests.api.conftest import ClientFactory

pytestmark = pytest.mark.files_only

# What differs between two runs of the same requests: clocks (and the stats timed by them) and the random parts of
# a new session.
VOLATILE = {"time", "createdAt", "updatedAt", "instance", "requestId", "llmMs", "toolMs", "ttftMs", "decodeMs"}

REQUESTS: list[tuple[str, Any, dict[str, str]]] = [
    ("/sessions/s/events", {"events": open_turn(1)}, {}),
    ("/sessions/s/events", {"events": [note("x")], "expectedSeq": 0}, {}),  # SEQ_CONFLICT
    ("/sessions/s/events", {"events": [{"type": "turn/end", "data": {}}]}, {}),  # INVALID_EVENT
    ("/sessions/s/events", {"events": close_turn(1)}, {"Idempotency-Key": "k"}),
    ("/sessions/s/events", {"events": close_turn(1)}, {"Idempotency-Key": "k"}),  # the kept answer, replayed
    ("/sessions/s/events", {"evnts": []}, {}),  # INVALID_REQUEST
    ("/sessions/missing/events", {"events": [note("x")]}, {}),  # SESSION_NOT_FOUND
    ("/sessions/bad%20id/events", {"events": [note("x")]}, {}),
    ("/sessions/s/events/", {"events": [note("x")]}, {}),  # not the route's path: the router answers
]


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {name: _stable(item) for name, item in value.items() if name not in VOLATILE}
    if isinstance(value, list):
        return [_stable(item) for item in value]
    return value


def _walk(client: TestClient) -> list[tuple[int, str | None, str | None, Any]]:
    assert client.post("/sessions", json={"id": "s"}).status_code == 201
    answers = []
    for path, body, headers in REQUESTS:
        answer = client.post(path, json=body, headers=headers)
        content = _stable(answer.json()) if answer.content else None
        answers.append(
            (answer.status_code, answer.headers.get("content-type"), answer.headers.get("location"), content)
        )
    answers.append(
        (
            client.post("/sessions/s/events", content=b"{", headers={"content-type": "application/json"}).status_code,
            None,
            None,
            None,
        )
    )
    return answers


def test_an_append_answers_as_the_documented_route_does(
    make_client: ClientFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    routed: list[str] = []
    framed: list[str] = []  # requests that entered FastAPI's own layers (its outermost is Starlette's error layer)
    route = Router.__call__
    frame = ServerErrorMiddleware.__call__

    async def counting(self: Router, scope: Any, receive: Any, send: Any) -> None:
        routed.append(scope.get("path", ""))
        await route(self, scope, receive, send)

    async def framing(self: ServerErrorMiddleware, scope: Any, receive: Any, send: Any) -> None:
        framed.append(scope.get("path", ""))
        await frame(self, scope, receive, send)

    monkeypatch.setattr(Router, "__call__", counting)
    monkeypatch.setattr(ServerErrorMiddleware, "__call__", framing)
    shortcut = _walk(make_client())
    assert "/sessions/s/events" not in routed, "appends did not take the shortcut"
    assert "/sessions/s/events" not in framed, "appends went through FastAPI's layers"
    assert "/sessions/s/events/" in routed
    assert "/sessions/s/events/" in framed

    async def never_shortcut(self: AppendShortcut, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    monkeypatch.setattr(AppendShortcut, "__call__", never_shortcut)
    routed.clear()
    framed.clear()
    through_router = _walk(make_client(create_app(Settings(data_dir=tmp_path / "other", fsync=False))))
    assert "/sessions/s/events" in routed
    assert "/sessions/s/events" in framed
    assert shortcut == through_router
    assert {status for status, *_ in shortcut} >= {201, 404, 409, 422}
