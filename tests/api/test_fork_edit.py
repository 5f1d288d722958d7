"""POST /sessions/{id}/fork at a turn or at a message, with events: edit and regenerate in one call (spec 12)."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from tests.api.builders import (
    TURN_LENGTH,
    assistant_message,
    note,
    open_turn,
    step_end,
    turn,
    turn_end,
    turn_start,
    turns,
    user_message,
)
from tests.api.helpers import assert_invalid_request, assert_problem, create, events_of, get_session


def _assistant_ids(client: TestClient, session_id: str) -> list[str]:
    return [
        event["data"]["message"]["id"]
        for event in events_of(client, session_id)
        if event["type"] == "assistant/message"
    ]


def _without_seq_and_time(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in event.items() if k not in ("seq", "time")} for event in events]


def test_an_edit_forks_before_the_turn_and_appends_the_edited_message(client: TestClient) -> None:
    create(client, id="src", seed=turns(3))
    edited = [turn_start(2), user_message("the edited question")]

    response = client.post("/sessions/src/fork", json={"sessionId": "edit", "atTurn": 1, "events": edited})

    assert response.status_code == 201, response.text
    child = response.json()
    assert child == get_session(client, "edit")
    assert (child["seedLength"], child["eventCount"], child["openTurn"], child["forkable"]) == (9, 11, 2, False)
    assert child["preview"] == "question 1"
    stored = events_of(client, "edit")
    assert stored[:9] == events_of(client, "src")[:9]
    assert _without_seq_and_time(stored[9:]) == edited
    assert [event["seq"] for event in stored[9:]] == [9, 10]
    assert all(event["time"] >= stored[8]["time"] for event in stored[9:])
    assert child["updatedAt"] == max(child["createdAt"], stored[-1]["time"])
    assert get_session(client, "src")["eventCount"] == 27  # the original is kept


def test_at_turn_zero_is_the_empty_seed(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))

    child = client.post("/sessions/src/fork", json={"atTurn": 0, "events": turn(1)}).json()

    assert (child["seedLength"], child["eventCount"], child["forkable"]) == (0, TURN_LENGTH, True)


def test_at_turn_takes_the_seed_to_that_turns_end(client: TestClient) -> None:
    create(client, id="src", seed=[*turns(2), *open_turn(3)])

    child = client.post("/sessions/src/fork", json={"atTurn": 2}).json()

    assert (child["seedLength"], child["lastTurnEndSeq"]) == (18, 17)
    missing = client.post("/sessions/src/fork", json={"atTurn": 3})
    assert_problem(missing, 422, "INVALID_BOUNDARY")
    assert "turn 3" in missing.json()["reason"]


def test_at_message_id_takes_the_seed_to_the_end_of_its_turn(client: TestClient) -> None:
    create(client, id="src", seed=turns(3))
    second = _assistant_ids(client, "src")[1]

    child = client.post("/sessions/src/fork", json={"atMessageId": second}).json()

    assert (child["seedLength"], child["lastTurnEndSeq"]) == (18, 17)


def test_at_message_id_is_refused_when_a_message_follows_it_in_its_turn(client: TestClient) -> None:
    first_answer = assistant_message(1, 1, "first try")
    create(
        client,
        id="src",
        seed=[
            turn_start(1),
            user_message("hi"),
            *[step for step in open_turn(1)[2:]],
            first_answer,
            user_message("steer"),
            step_end(1),
            turn_end(1),
        ],
    )
    refused = client.post("/sessions/src/fork", json={"atMessageId": first_answer["data"]["message"]["id"]})
    assert_problem(refused, 422, "INVALID_BOUNDARY")
    assert "follows" in refused.json()["reason"]

    unknown = client.post("/sessions/src/fork", json={"atMessageId": "no-such-message"})
    assert_problem(unknown, 422, "INVALID_BOUNDARY")
    assert "no-such-message" in unknown.json()["reason"]


def test_at_message_id_in_an_open_turn_is_refused(client: TestClient) -> None:
    create(client, id="src", seed=[*turn(1), *open_turn(2)[:3], assistant_message(2, 1, "partial")])
    last = _assistant_ids(client, "src")[-1]
    refused = client.post("/sessions/src/fork", json={"atMessageId": last})
    assert_problem(refused, 422, "INVALID_BOUNDARY")
    assert "not ended" in refused.json()["reason"]


def test_at_most_one_boundary_is_given(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    assert_invalid_request(client.post("/sessions/src/fork", json={"atSeq": 8, "atTurn": 1}), "atTurn")
    assert_invalid_request(client.post("/sessions/src/fork", json={"atTurn": 1, "atMessageId": "x"}), "atMessageId")
    assert_invalid_request(client.post("/sessions/src/fork", json={"atTurn": -1}), "atTurn")
    assert_invalid_request(client.post("/sessions/src/fork", json={"events": []}), "events")
    assert_invalid_request(client.post("/sessions/src/fork", json={"events": [note("x")] * 1001}), "events")
    assert client.get("/sessions").json()["items"][-1]["id"] == "src"


def test_a_bad_event_makes_no_child(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))

    refused = client.post(
        "/sessions/src/fork", json={"sessionId": "kid", "atTurn": 1, "events": [turn_start(2), turn_start(3)]}
    )

    assert_problem(refused, 422, "INVALID_EVENT", index=1)
    assert_problem(client.get("/sessions/kid"), 404, "SESSION_NOT_FOUND")
    assert [item["id"] for item in client.get("/sessions").json()["items"]] == ["src"]


def test_events_with_seq_are_refused_as_an_append_would(client: TestClient) -> None:
    create(client, id="src", seed=turns(1))
    refused = client.post("/sessions/src/fork", json={"events": [{**turn_start(2), "seq": 9}]})
    assert_problem(refused, 422, "INVALID_EVENT", index=0)


def test_a_fork_with_events_is_idempotent(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    body = {"atTurn": 1, "events": [turn_start(2), user_message("again")]}
    headers = {"Idempotency-Key": "edit-1"}

    first = client.post("/sessions/src/fork", json=body, headers=headers)
    again = client.post("/sessions/src/fork", json=body, headers=headers)

    assert first.status_code == again.status_code == 201
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()
    assert len(client.get("/sessions").json()["items"]) == 2
