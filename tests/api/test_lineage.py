"""Lineage (spec 7): a session's ancestors while each parent is live, the first one that is not, and its children."""

from __future__ import annotations

from starlette.testclient import TestClient

from tests.api.builders import turn
from tests.api.helpers import assert_problem, create, fork


def lineage(client: TestClient, session_id: str) -> dict[str, object]:
    response = client.get(f"/sessions/{session_id}/lineage")
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def ids(sessions: object) -> list[str]:
    assert isinstance(sessions, list)
    return [item["id"] for item in sessions]


def test_ancestors_go_up_the_chain_and_children_are_listed_in_order(client: TestClient) -> None:
    create(client, id="root", seed=turn(1))
    fork(client, "root", sessionId="mid")
    fork(client, "mid", sessionId="leaf")
    fork(client, "mid", sessionId="leaf2")
    body = lineage(client, "leaf")
    assert ids(body["ancestors"]) == ["mid", "root"]
    assert body["missingAncestor"] is None
    assert ids(lineage(client, "mid")["children"]) == ["leaf", "leaf2"]
    assert ids(lineage(client, "root")["ancestors"]) == []
    assert ids(lineage(client, "root")["children"]) == ["mid"]
    first = body["ancestors"]
    assert isinstance(first, list) and first[0]["parentSession"] == "root"  # whole Session resources


def test_the_chain_stops_at_the_first_parent_that_is_not_live(client: TestClient) -> None:
    create(client, id="root", seed=turn(1))
    fork(client, "root", sessionId="mid")
    fork(client, "mid", sessionId="leaf")
    assert client.delete("/sessions/mid").status_code == 204
    body = lineage(client, "leaf")
    assert ids(body["ancestors"]) == []
    assert body["missingAncestor"] == "mid"
    create(client, id="orphan", meta={"parentSession": "never-was"})
    assert lineage(client, "orphan")["missingAncestor"] == "never-was"


def test_a_cycle_made_with_meta_stops_before_an_id_already_listed(client: TestClient) -> None:
    create(client, id="a", meta={"parentSession": "b"})
    create(client, id="b", meta={"parentSession": "a"})
    body = lineage(client, "a")
    assert ids(body["ancestors"]) == ["b"]
    assert body["missingAncestor"] is None
    assert ids(body["children"]) == ["b"]
    create(client, id="self", meta={"parentSession": "self"})
    assert lineage(client, "self") == {
        "ancestors": [],
        "children": lineage(client, "self")["children"],
        "missingAncestor": None,
    }
    assert ids(lineage(client, "self")["children"]) == ["self"]


def test_a_missing_session_has_no_lineage(client: TestClient) -> None:
    assert_problem(client.get("/sessions/nope/lineage"), 404, "SESSION_NOT_FOUND")
