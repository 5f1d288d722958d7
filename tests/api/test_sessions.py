"""POST /sessions, GET /sessions, GET /sessions/{id}, DELETE /sessions/{id}: the Session resource and its list."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from tests.api.builders import as_seed, note, open_turn, turn, turns
from tests.api.helpers import (
    GENERATED_ID,
    NO_STATS,
    SESSION_FIELDS,
    append,
    assert_invalid_request,
    assert_problem,
    create,
    events_of,
    fork,
    get_session,
    listed_pages,
)

# -- create ---------------------------------------------------------------------------------------------------------


def test_create_without_a_body_makes_an_empty_session_with_a_generated_id(client: TestClient) -> None:
    response = client.post("/sessions")

    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    session = response.json()
    assert set(session) == SESSION_FIELDS
    assert GENERATED_ID.fullmatch(session["id"])
    assert response.headers["location"] == f"/sessions/{session['id']}"
    assert isinstance(session["instance"], str) and session["instance"]
    assert isinstance(session["createdAt"], int)
    assert session | {"id": None, "instance": None, "createdAt": None} == {
        "id": None,
        "instance": None,
        "createdAt": None,
        "cwd": None,
        "parentSession": None,
        "seedLength": None,
        "origin": None,
        "delegationDepth": 0,
        "agentPreset": None,
        "archived": False,
        "eventCount": 0,
        "lastEventType": None,
        "openTurn": None,
        "lastTurnEndSeq": None,
        "forkable": True,
        "updatedAt": session["createdAt"],
        "title": None,
        "preview": None,
        "bytes": session["bytes"],
        "stats": NO_STATS,
        "usage": {},
        "ownUsage": {},
    }
    assert session["bytes"] == len(
        f'{{"type":"session","version":0,"id":"{session["id"]}","createdAt":'
        f'{session["createdAt"]},"delegationDepth":0,"instance":"{session["instance"]}"}}\n'
    )


def test_create_keeps_the_given_id_and_the_meta(client: TestClient) -> None:
    meta = {
        "cwd": "/work/project",
        "parentSession": "elsewhere-1",
        "seedLength": 0,
        "origin": "subagent",
        "delegationDepth": 2,
        "agentPreset": "reviewer",
    }
    response = client.post("/sessions", json={"id": "my.session_1-a", "meta": meta})

    assert response.status_code == 201
    assert response.headers["location"] == "/sessions/my.session_1-a"
    session = response.json()
    assert session["id"] == "my.session_1-a"
    assert {key: session[key] for key in meta} == meta
    assert get_session(client, "my.session_1-a") == session


def test_create_ignores_meta_created_at_and_orders_sessions_by_creation(client: TestClient) -> None:
    first = create(client, meta={"createdAt": 5})
    second = create(client, meta={"createdAt": 4})
    third = create(client)

    assert first["createdAt"] != 5
    assert first["createdAt"] < second["createdAt"] < third["createdAt"]


def test_a_null_member_counts_as_absent(client: TestClient) -> None:
    response = client.post("/sessions", json={"id": None, "seed": None, "meta": {"cwd": None, "origin": None}})

    assert response.status_code == 201
    session = response.json()
    assert GENERATED_ID.fullmatch(session["id"])
    assert session["cwd"] is None
    assert session["origin"] is None
    assert session["eventCount"] == 0


def test_create_ignores_a_source_member(client: TestClient) -> None:
    response = client.post("/sessions", json={"id": "s", "source": {"anything": [1, 2]}})

    assert response.status_code == 201
    assert response.json()["eventCount"] == 0


def test_create_from_a_seed_keeps_its_events_exactly(client: TestClient) -> None:
    seed = as_seed(turns(2))
    seed[0]["ignorable"] = True  # extra keys travel with the event

    session = create(client, id="seeded", seed=seed)

    assert session["eventCount"] == 18
    assert session["lastEventType"] == "turn/end"
    assert session["lastTurnEndSeq"] == 17
    assert session["openTurn"] is None
    assert session["forkable"] is True
    assert events_of(client, "seeded") == seed


def test_a_seed_may_end_inside_an_open_turn(client: TestClient) -> None:
    seed = turn(1) + open_turn(2)

    session = create(client, id="open", seed=seed)

    assert session["eventCount"] == 13
    assert session["lastEventType"] == "assistant/chunk"
    assert session["openTurn"] == 2
    assert session["lastTurnEndSeq"] == 8
    assert session["forkable"] is False
    stored = events_of(client, "open")
    assert [event["seq"] for event in stored] == list(range(13))
    assert all(isinstance(event["time"], int) for event in stored)
    assert [{k: v for k, v in event.items() if k not in ("seq", "time")} for event in stored] == seed


def test_a_seed_of_a_log_only_event_is_not_forkable(client: TestClient) -> None:
    session = create(client, id="note", seed=[note("hello")])

    assert session["lastEventType"] == "forklog-test/note"
    assert session["openTurn"] is None
    assert session["lastTurnEndSeq"] is None
    assert session["forkable"] is False


# -- read -------------------------------------------------------------------------------------------------------------


def test_get_session_follows_the_log(client: TestClient) -> None:
    created = create(client, id="s")
    append(client, "s", open_turn(1))

    session = get_session(client, "s")
    stored = client.get("/sessions/s/events").json()["events"]

    assert session == created | {
        "eventCount": 4,
        "lastEventType": "assistant/chunk",
        "openTurn": 1,
        "lastTurnEndSeq": None,
        "forkable": False,
        "updatedAt": stored[-1]["time"],
        "preview": "question 1",
        "bytes": created["bytes"] + sum(len(json.dumps(event, separators=(",", ":"))) + 1 for event in stored),
    }


# -- delete -----------------------------------------------------------------------------------------------------------


def test_delete_removes_the_session_and_its_log(client: TestClient) -> None:
    create(client, id="gone", seed=turn(1))

    response = client.delete("/sessions/gone")

    assert response.status_code == 204
    assert response.content == b""
    assert_problem(client.get("/sessions/gone"), 404, "SESSION_NOT_FOUND")
    assert_problem(client.get("/sessions/gone/events"), 404, "SESSION_NOT_FOUND")
    assert_problem(client.delete("/sessions/gone"), 404, "SESSION_NOT_FOUND")


def test_delete_leaves_the_children_their_logs(client: TestClient) -> None:
    create(client, id="parent", seed=turns(2))
    child = fork(client, "parent", sessionId="child")
    child_events = events_of(client, "child")

    assert client.delete("/sessions/parent").status_code == 204

    assert get_session(client, "child") == child
    assert child["parentSession"] == "parent"
    assert events_of(client, "child") == child_events


def test_a_deleted_and_recreated_id_is_a_new_incarnation(client: TestClient) -> None:
    old = create(client, id="again", seed=turn(1))
    assert client.delete("/sessions/again").status_code == 204

    new = create(client, id="again")

    assert new["instance"] != old["instance"]
    assert new["eventCount"] == 0
    assert events_of(client, "again") == []


# -- list -------------------------------------------------------------------------------------------------------------


def test_list_is_in_creation_order(client: TestClient) -> None:
    ids = ["zeta", "alpha", "mid", "beta"]
    for session_id in ids:
        create(client, id=session_id)

    response = client.get("/sessions")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    page = response.json()
    assert [item["id"] for item in page["items"]] == ids
    assert page["nextCursor"] is None
    assert page["items"][2] == get_session(client, "mid")


def test_an_empty_list(client: TestClient) -> None:
    assert client.get("/sessions").json() == {"items": [], "nextCursor": None}


@pytest.mark.parametrize(("count", "expected"), [(5, [2, 2, 1]), (4, [2, 2]), (1, [1])])
def test_list_pages_with_limit_and_cursor(client: TestClient, count: int, expected: list[int]) -> None:
    ids = [f"s{index}" for index in range(count)]
    for session_id in ids:
        create(client, id=session_id)

    pages = listed_pages(client, limit=2)

    assert [len(page) for page in pages] == expected  # a full last page has no nextCursor either
    assert [session_id for page in pages for session_id in page] == ids


def test_the_default_page_holds_100_sessions(client: TestClient) -> None:
    for index in range(101):
        create(client, id=f"s{index:03}")

    page = client.get("/sessions").json()

    assert [item["id"] for item in page["items"]] == [f"s{index:03}" for index in range(100)]
    rest = client.get("/sessions", params={"cursor": page["nextCursor"]}).json()
    assert [item["id"] for item in rest["items"]] == ["s100"]
    assert rest["nextCursor"] is None


def test_a_cursor_survives_the_deletion_of_the_last_session_it_saw(client: TestClient) -> None:
    for session_id in ("a", "b", "c", "d"):
        create(client, id=session_id)
    first = client.get("/sessions", params={"limit": 2}).json()
    assert client.delete("/sessions/b").status_code == 204

    rest = client.get("/sessions", params={"limit": 2, "cursor": first["nextCursor"]}).json()

    assert [item["id"] for item in rest["items"]] == ["c", "d"]


def test_list_filters_by_parent(client: TestClient) -> None:
    create(client, id="root", seed=turn(1))
    create(client, id="other", seed=turn(1))
    for child in ("c1", "c2", "c3"):
        fork(client, "root", sessionId=child)
    fork(client, "other", sessionId="not-mine")
    create(client, id="by-meta", meta={"parentSession": "root"})

    assert listed_pages(client, parent="root", limit=2) == [["c1", "c2"], ["c3", "by-meta"]]
    assert listed_pages(client, parent="nobody") == [[]]


@pytest.mark.parametrize("limit", ["0", "1001", "-1", "abc", "1.5", ""])
def test_list_refuses_a_bad_limit(client: TestClient, limit: str) -> None:
    assert_invalid_request(client.get("/sessions", params={"limit": limit}), "limit")


def test_list_accepts_the_limit_bounds(client: TestClient) -> None:
    create(client, id="a")
    create(client, id="b")

    assert [item["id"] for item in client.get("/sessions", params={"limit": "1"}).json()["items"]] == ["a"]
    assert client.get("/sessions", params={"limit": "1000"}).json()["nextCursor"] is None
    assert len(client.get("/sessions", params={"limit": "2.0"}).json()["items"]) == 2


@pytest.mark.parametrize("cursor", ["zzz", "", "bm90LWpzb24", "WzEsMiwzXQ"])  # not base64 JSON, [1,2,3]
def test_list_refuses_a_cursor_it_did_not_issue(client: TestClient, cursor: str) -> None:
    assert_invalid_request(client.get("/sessions", params={"cursor": cursor}), "cursor")


def test_list_refuses_a_malformed_parent(client: TestClient) -> None:
    assert_invalid_request(client.get("/sessions", params={"parent": "../x"}), "parent")


def test_an_unknown_meta_key_is_a_request_error_before_everything_else(client: TestClient) -> None:
    create(client, id="s")
    body = {"id": "s", "seed": [{"type": "turn/end", "data": {"turn": 1}}], "meta": {"color": "red", "cwd": 5}}
    problem = assert_problem(client.post("/sessions", json=body), 422, "INVALID_REQUEST")
    assert problem["errors"] == [{"field": "meta.color", "reason": "unknown member"}]
    problem = assert_problem(
        client.post("/sessions", json={"id": "t", "meta": {"zeta": 1, "alpha": None}}), 422, "INVALID_REQUEST"
    )
    assert [item["field"] for item in problem["errors"]] == ["meta.alpha", "meta.zeta"]
    assert client.get("/sessions/t").status_code == 404
