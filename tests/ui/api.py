"""The other client: what a test does to the service behind the page's back (httpx, optionally with a key)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.server import Server
from tests.events import Event

__all__ = ["Api"]


class Api:
    def __init__(self, server: Server, key: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        self.client = httpx.Client(base_url=server.base, headers=headers, timeout=30.0)

    def create(self, session_id: str, **body: Any) -> dict[str, Any]:
        answer = self.client.post("/sessions", json={"id": session_id, **body})
        assert answer.status_code == 201, answer.text
        created: dict[str, Any] = answer.json()
        return created

    def append(self, session_id: str, events: list[Event]) -> dict[str, Any]:
        """Appends ``events`` in batches of at most 1000 (the route's limit); the last answer."""
        answer: dict[str, Any] = {}
        for start in range(0, len(events), 1000):
            response = self.client.post(f"/sessions/{session_id}/events", json={"events": events[start : start + 1000]})
            assert response.status_code == 201, response.text
            answer = response.json()
        return answer

    def session(self, session_id: str) -> httpx.Response:
        return self.client.get(f"/sessions/{session_id}")

    def close(self) -> None:
        self.client.close()
