"""Events of whole turns, and what the server holds, read past the proxy: the tests count changes there."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.server import Server


def turn(number: int, text: str = "Hello") -> list[dict[str, Any]]:
    """A whole turn: start, the user's message, one step with the assistant's answer, end."""
    return [
        {"type": "turn/start", "data": {"turn": number}},
        {
            "type": "user/message",
            "surfaceOp": "append",
            "data": {
                "id": f"u{number}",
                "role": "user",
                "content": [{"type": "text", "text": text}],
                "source": {"kind": "user"},
            },
        },
        {"type": "step/start", "data": {"turn": number, "step": 1}},
        {
            "type": "assistant/message",
            "surfaceOp": "append",
            "data": {
                "turn": number,
                "step": 1,
                "message": {
                    "id": f"a{number}",
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"Answer {number}"}],
                    "source": {"kind": "model", "provider": "deepseek", "model": "deepseek-chat"},
                },
            },
        },
        {"type": "step/end", "data": {"turn": number, "step": 1}},
        {"type": "turn/end", "data": {"turn": number, "reason": {"kind": "completed"}}},
    ]


def note(number: int) -> dict[str, Any]:
    """A log-only event: allowed anywhere, one a change."""
    return {"type": "test/note", "data": {"n": number}}


def stored_events(server: Server, session_id: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{server.base}/sessions/{session_id}/events", params={"limit": 10000}, timeout=10)
    answer.raise_for_status()
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


def session_ids(server: Server, prefix: str) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"{server.base}/sessions", params=params, timeout=10).json()
        ids += [item["id"] for item in page["items"] if item["id"].startswith(prefix)]
        cursor = page["nextCursor"]
        if cursor is None:
            return ids


def exists(server: Server, session_id: str) -> bool:
    return httpx.get(f"{server.base}/sessions/{session_id}", timeout=10).status_code == 200
