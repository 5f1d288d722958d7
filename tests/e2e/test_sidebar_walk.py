"""The README's sidebar walk (spec 12) after its curl walk, run by a real ``python -m app``."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import StartServer
from tests.e2e.test_server import check_walk_answers, run_walk

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
