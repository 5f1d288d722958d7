"""POST /sessions/{id}/snapshot and POST /sessions/{id}/fork: the RFC's boundary rule, seed and meta."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.builders import note, open_turn, turn, turns
from tests.api.helpers import (
    GENERATED_ID,
    append,
    assert_invalid_request,
    assert_problem,
    create,
    events_of,
    fork,
    get_session,
    history_of,
)

LINEAGE = ("parentSession", "seedLength", "cwd", "origin", "delegationDepth", "agentPreset")


def _source(client: TestClient) -> dict[str, Any]:
    """A session with every header field set, two complete turns and a third one open."""
    meta = {"cwd": "/work", "origin": "subagent", "delegationDepth": 3, "agentPreset": "coder", "parentSession": "x"}
    create(client, id="src", meta=meta, seed=turns(2))
    return append(client, "src", open_turn(3))["session"]  # type: ignore[no-any-return]


# -- snapshot ---------------------------------------------------------------------------------------------------------


def test_snapshot_at_the_last_turn_end_is_the_whole_log(client: TestClient) -> None:
    create(client, id="src", meta={"cwd": "/work"}, seed=turns(2))
    source = get_session(client, "src")

    response = client.post("/sessions/src/snapshot", json={})

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "source": source,
        "seed": events_of(client, "src"),
        "meta": {"parentSession": "src", "seedLength": 18, "cwd": "/work"},
    }


def test_snapshot_meta_has_no_cwd_when_the_source_has_none(client: TestClient) -> None:
    create(client, id="src", seed=turn(1))

    assert client.post("/sessions/src/snapshot").json()["meta"] == {"parentSession": "src", "seedLength": 9}


def test_snapshot_with_at_seq_is_the_prefix_through_that_turn_end(client: TestClient) -> None:
    source = _source(client)

    response = client.post("/sessions/src/snapshot", json={"atSeq": 8})

    assert response.status_code == 200
    body = response.json()
    assert body["source"] == source
    assert body["seed"] == events_of(client, "src")[:9]
    assert body["meta"] == {"parentSession": "src", "seedLength": 9, "cwd": "/work"}


@pytest.mark.parametrize(
    "request_body",
    [
        pytest.param({"content": b""}, id="no-body"),
        pytest.param({"json": {}}, id="empty-object"),
        pytest.param({"json": {"atSeq": None, "instance": None, "expectedSeq": None}}, id="all-null"),
    ],
)
def test_an_empty_snapshot_request_takes_the_whole_log(client: TestClient, request_body: dict[str, Any]) -> None:
    create(client, id="src", seed=turn(1))

    response = client.post("/sessions/src/snapshot", **request_body)

    assert response.status_code == 200, response.text
    assert response.json()["meta"]["seedLength"] == 9


def test_an_empty_session_is_forkable(client: TestClient) -> None:
    create(client, id="src")

    snapshot = client.post("/sessions/src/snapshot").json()
    child = fork(client, "src")

    assert snapshot["seed"] == []
    assert snapshot["meta"] == {"parentSession": "src", "seedLength": 0}
    assert (child["eventCount"], child["seedLength"], child["forkable"]) == (0, 0, True)


def test_snapshot_and_fork_never_change_the_source(client: TestClient) -> None:
    _source(client)
    before = (get_session(client, "src"), events_of(client, "src"), history_of(client, "src"))

    assert client.post("/sessions/src/snapshot", json={"atSeq": 17}).status_code == 200
    fork(client, "src", atSeq=8, sessionId="child")
    append(client, "child", turn(2))

    assert (get_session(client, "src"), events_of(client, "src"), history_of(client, "src")) == before


# -- fork -------------------------------------------------------------------------------------------------------------


def test_fork_creates_the_child_from_the_whole_log(client: TestClient) -> None:
    create(client, id="src", meta={"cwd": "/work", "agentPreset": "coder"}, seed=turns(2))

    response = client.post("/sessions/src/fork", json={"sessionId": "child"})

    assert response.status_code == 201
    assert response.headers["location"] == "/sessions/child"
    child = response.json()
    assert child == get_session(client, "child")
    assert child["id"] == "child"
    assert child["instance"] != get_session(client, "src")["instance"]
    assert child["createdAt"] > get_session(client, "src")["createdAt"]
    assert child | {"id": None, "instance": None, "createdAt": None} == {
        "id": None,
        "instance": None,
        "createdAt": None,
        "cwd": "/work",
        "parentSession": "src",
        "seedLength": 18,
        "origin": None,
        "delegationDepth": 0,
        "agentPreset": None,
        "eventCount": 18,
        "lastEventType": "turn/end",
        "openTurn": None,
        "lastTurnEndSeq": 17,
        "forkable": True,
        "updatedAt": child["createdAt"],  # the child is as new as the fork
        "title": None,
        "preview": "question 1",
        "bytes": child["bytes"],
        "stats": get_session(client, "src")["stats"],  # the seed is the whole log
        "usage": {},
        "ownUsage": {},
        "archived": False,
    }
    assert events_of(client, "child") == events_of(client, "src")
    assert history_of(client, "child") == history_of(client, "src")


def test_fork_at_an_earlier_turn_while_a_turn_is_open(client: TestClient) -> None:
    _source(client)

    child = fork(client, "src", atSeq=8.0)

    assert GENERATED_ID.fullmatch(child["id"])
    assert {key: child[key] for key in LINEAGE} == {
        "parentSession": "src",
        "seedLength": 9,
        "cwd": "/work",
        "origin": None,
        "delegationDepth": 0,
        "agentPreset": None,
    }
    assert events_of(client, child["id"]) == events_of(client, "src")[:9]
    assert history_of(client, child["id"]) == history_of(client, "src", atSeq=8)


def test_a_child_goes_on_from_its_seed_independently(client: TestClient) -> None:
    _source(client)
    fork(client, "src", atSeq=17, sessionId="child")

    appended = append(client, "child", [note("child only")])["events"]
    append(client, "src", [note("source only")])

    assert appended[0]["seq"] == 18
    assert [event["data"] for event in events_of(client, "child")[18:]] == [{"text": "child only"}]
    assert get_session(client, "src")["eventCount"] == 23


def test_a_fork_of_a_fork(client: TestClient) -> None:
    create(client, id="a", seed=turn(1))
    fork(client, "a", sessionId="b")
    append(client, "b", turn(2))

    grandchild = fork(client, "b", sessionId="c")

    assert (grandchild["parentSession"], grandchild["seedLength"]) == ("b", 18)
    assert events_of(client, "c") == events_of(client, "b")


def test_a_snapshot_posted_as_is_creates_the_forks_child(client: TestClient) -> None:
    _source(client)
    snapshot = client.post("/sessions/src/snapshot", json={"atSeq": 17})
    assert snapshot.status_code == 200

    created = client.post("/sessions", content=snapshot.content, headers={"content-type": "application/json"})
    forked = fork(client, "src", atSeq=17)

    assert created.status_code == 201, created.text
    made = created.json()
    assert {key: made[key] for key in LINEAGE} == {key: forked[key] for key in LINEAGE}
    different = ("id", "instance", "createdAt", "updatedAt", "bytes")  # the header holds the id
    assert {k: v for k, v in made.items() if k not in different} == {
        k: v for k, v in forked.items() if k not in different
    }
    assert events_of(client, made["id"]) == events_of(client, forked["id"]) == snapshot.json()["seed"]
    assert history_of(client, made["id"]) == history_of(client, forked["id"])


def test_null_members_of_a_fork_count_as_absent(client: TestClient) -> None:
    create(client, id="src", seed=turn(1))

    child = fork(client, "src", sessionId=None, atSeq=None, expectedSeq=None, instance=None)

    assert GENERATED_ID.fullmatch(child["id"])
    assert child["seedLength"] == 9


def test_fork_works_bare(client: TestClient) -> None:
    create(client, id="src", seed=turn(1))

    response = client.post("/sessions/src/fork")  # curl -X POST .../fork

    assert response.status_code == 201
    assert response.json()["parentSession"] == "src"
    assert response.headers["location"] == f"/sessions/{response.json()['id']}"


def test_every_turn_end_reason_is_a_boundary(client: TestClient) -> None:
    create(client, id="src", seed=turn(1, kind="aborted") + turn(2, kind="some-new-kind"))

    assert fork(client, "src", atSeq=8)["seedLength"] == 9
    assert fork(client, "src")["seedLength"] == 18


# -- the boundary rule -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["snapshot", "fork"])
def test_no_boundary_while_a_turn_is_open(client: TestClient, operation: str) -> None:
    _source(client)

    response = client.post(f"/sessions/src/{operation}", json={})

    assert_problem(
        response, 409, "NOT_AT_TURN_BOUNDARY", lastEventType="assistant/chunk", openTurn=3, lastTurnEndSeq=17
    )
    assert client.get("/sessions").json()["items"] == [get_session(client, "src")]  # nothing was created


@pytest.mark.parametrize("operation", ["snapshot", "fork"])
def test_no_boundary_before_the_first_turn_completes(client: TestClient, operation: str) -> None:
    create(client, id="src", seed=open_turn(1))

    response = client.post(f"/sessions/src/{operation}")

    assert_problem(
        response, 409, "NOT_AT_TURN_BOUNDARY", lastEventType="assistant/chunk", openTurn=1, lastTurnEndSeq=None
    )


@pytest.mark.parametrize("operation", ["snapshot", "fork"])
def test_no_boundary_after_a_log_only_event(client: TestClient, operation: str) -> None:
    create(client, id="src", seed=[*turn(1), note("after")])

    response = client.post(f"/sessions/src/{operation}")

    assert_problem(
        response, 409, "NOT_AT_TURN_BOUNDARY", lastEventType="forklog-test/note", openTurn=None, lastTurnEndSeq=8
    )
    assert get_session(client, "src")["forkable"] is False


@pytest.mark.parametrize("operation", ["snapshot", "fork"])
@pytest.mark.parametrize(
    "at_seq",
    [
        pytest.param(-1, id="negative"),
        pytest.param(22, id="the-event-count"),
        pytest.param(1000, id="beyond"),
        pytest.param(3, id="not-a-turn-end"),
        pytest.param(21, id="the-open-turns-last-event"),
    ],
)
def test_at_seq_must_name_a_turn_end(client: TestClient, operation: str, at_seq: int) -> None:
    _source(client)

    response = client.post(f"/sessions/src/{operation}", json={"atSeq": at_seq})

    assert_problem(response, 422, "INVALID_BOUNDARY")


@pytest.mark.parametrize("operation", ["snapshot", "fork"])
@pytest.mark.parametrize("at_seq", [8.5, "8", True, [8], {"seq": 8}])
def test_at_seq_must_be_an_integral_number(client: TestClient, operation: str, at_seq: object) -> None:
    _source(client)

    assert_invalid_request(client.post(f"/sessions/src/{operation}", json={"atSeq": at_seq}), "atSeq")


@pytest.mark.parametrize("operation", ["snapshot", "fork"])
def test_expected_seq_and_instance_guard_a_snapshot_and_a_fork(client: TestClient, operation: str) -> None:
    source = _source(client)
    current = {"atSeq": 17, "expectedSeq": 22, "instance": source["instance"]}

    assert client.post(f"/sessions/src/{operation}", json=current).status_code in (200, 201)
    assert client.post(f"/sessions/src/{operation}", json={**current, "expectedSeq": 22.0}).status_code in (200, 201)
    assert_problem(
        client.post(f"/sessions/src/{operation}", json={**current, "expectedSeq": 21}),
        409,
        "SEQ_CONFLICT",
        currentSeq=22,
    )
    assert_problem(
        client.post(f"/sessions/src/{operation}", json={**current, "instance": "old"}), 409, "SESSION_NOT_LIVE"
    )


def test_fork_refuses_a_malformed_child_id(client: TestClient) -> None:
    create(client, id="src")

    assert_invalid_request(client.post("/sessions/src/fork", json={"sessionId": "-bad"}), "sessionId")
    assert_invalid_request(client.post("/sessions/src/fork", json={"sessionId": 7}), "sessionId")
    assert_invalid_request(client.post("/sessions/src/fork", json={"sessionId": ""}), "sessionId")
