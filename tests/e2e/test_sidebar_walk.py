"""The README's sidebar walk (spec 12) after its curl walk, run by a real ``python -m app``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.test_server import check_walk_answers, run_walk
from tests.events import turn_end, turn_start, user_message

pytestmark = pytest.mark.e2e


def test_the_readme_sidebar_walk(start_server: StartServer) -> None:
    server = start_server()
    check_walk_answers(run_walk(server.base))
    run_walk(server.base, "<!-- curl-retry -->")

    listed, searched, edited = run_walk(server.base, "<!-- curl-sidebar -->")

    assert (listed.status, searched.status, edited.status) == (200, 200, 201), edited.body
    items = listed.json()["items"]
    assert [item["id"] for item in items] == ["demo", "demo-child"]
    assert items[0]["preview"] == "Hello" and items[0]["updatedAt"] >= items[0]["createdAt"]
    matches = searched.json()["items"]
    assert {item["id"] for item in matches} == {"demo", "demo-child"}
    assert all(item["match"]["snippet"] == "Hello" and item["match"]["seq"] == 1 for item in matches)
    child = edited.json()
    assert (child["id"], child["seedLength"], child["eventCount"], child["openTurn"]) == ("demo-edit", 0, 2, 1)
    assert child["preview"] == "Hello, in French"
    assert server.get("/sessions/demo").json()["eventCount"] == 8


def _turn(text: str) -> list[dict[str, object]]:
    """A one-turn seed that holds only the user's message."""
    return [turn_start(1), user_message(text), turn_end(1)]


def test_a_search_after_kill_9_finds_what_was_acknowledged(start_server: StartServer, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = start_server(data_dir)
    for number in range(20):
        made = first.post("/sessions", {"id": f"s{number}", "seed": _turn(f"crash test {number} words")})
        assert made.status_code == 201, made.text
    time.sleep(1.5)  # acknowledged more than a second before the search
    late = first.post("/sessions", {"id": "late", "seed": _turn("crash test late words")})
    assert late.status_code == 201
    first.kill()

    second = start_server(data_dir)
    found = second.get("/sessions", q="crash words", limit=100).json()["items"]
    assert {item["id"] for item in found} == {f"s{number}" for number in range(20)} | {"late"}
    assert second.get("/sessions", q="crash 7 words").json()["items"][0]["id"] == "s7"
    assert second.get("/sessions", q="banana").json()["items"] == []
