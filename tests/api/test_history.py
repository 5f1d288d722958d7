"""GET /sessions/{id}/history: the model history, now or at a turn/end (``atSeq``)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.builders import (
    Event,
    assistant_message,
    open_turn,
    step_end,
    step_start,
    tool_call,
    tool_result,
    turn,
    turn_end,
    turn_start,
    user_message,
)
from tests.api.helpers import append, assert_invalid_request, assert_problem, create, history_of


def _message(event: Event) -> Any:
    return event["data"] if event["type"] == "user/message" else event["data"]["message"]


def _compacted_session(client: TestClient) -> list[Event]:
    """Turn 1 asks and answers; turn 2 replaces both with a summary (seq 7) and answers again."""
    events = [
        turn_start(1),
        user_message("question"),
        step_start(1),
        assistant_message(1, 1, "answer"),
        step_end(1),
        turn_end(1),
        turn_start(2),
        user_message("summary", surface_op={"op": "replace", "start": 1, "end": 3}, sources=[1, 3]),
        step_start(2),
        assistant_message(2, 1, "second answer"),
        step_end(2),
        turn_end(2),
    ]
    create(client, id="s")
    return append(client, "s", events)["events"]  # type: ignore[no-any-return]


def test_history_folds_the_surface_events(client: TestClient) -> None:
    stored = _compacted_session(client)

    response = client.get("/sessions/s/history")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"messages": [_message(stored[7]), _message(stored[9])], "eventCount": 12}


@pytest.mark.parametrize("at_seq", ["5", "5.0", " 5"])
def test_history_at_a_turn_end(client: TestClient, at_seq: str) -> None:
    stored = _compacted_session(client)

    response = client.get("/sessions/s/history", params={"atSeq": at_seq})

    assert response.status_code == 200
    assert response.json() == {"messages": [_message(stored[1]), _message(stored[3])], "eventCount": 12}


def test_history_holds_tool_results_and_skips_empty_answers(client: TestClient) -> None:
    events = [
        turn_start(1),
        user_message("read a"),
        step_start(1),
        assistant_message(1, 1, None),  # no content: a surface node, no message
        tool_call(1, 1, "c1"),
        tool_result(1, 1, "c1", "contents of a"),
        step_end(1),
        turn_end(1),
    ]
    create(client, id="s", seed=events)

    assert history_of(client, "s") == [_message(events[1]), _message(events[5])]


def test_history_at_an_earlier_turn_while_a_turn_is_open(client: TestClient) -> None:
    first = turn(1)
    create(client, id="s", seed=first + turn(2) + open_turn(3))

    at_first = history_of(client, "s", atSeq=8)

    assert at_first == [_message(event) for event in first if "surfaceOp" in event]
    assert len(history_of(client, "s")) == 7  # 3 per complete turn, 1 in the open one


def test_the_history_of_an_empty_session(client: TestClient) -> None:
    create(client, id="s")

    assert client.get("/sessions/s/history").json() == {"messages": [], "eventCount": 0}


@pytest.mark.parametrize("at_seq", ["abc", "1.5", "", "true", "nan", "inf", "8_0", "0x8", "8e"])
def test_history_refuses_an_at_seq_that_is_not_an_integer(client: TestClient, at_seq: str) -> None:
    create(client, id="s", seed=turn(1))

    assert_invalid_request(client.get("/sessions/s/history", params={"atSeq": at_seq}), "atSeq")


@pytest.mark.parametrize(
    "at_seq",
    [
        pytest.param("-1", id="negative"),
        pytest.param("9", id="the-event-count"),
        pytest.param("100000000000000000000", id="far-beyond"),
        pytest.param("3", id="not-a-turn-end"),
        pytest.param("0", id="turn-start"),
    ],
)
def test_history_refuses_an_at_seq_that_is_not_a_boundary(client: TestClient, at_seq: str) -> None:
    create(client, id="s", seed=turn(1))

    assert_problem(client.get("/sessions/s/history", params={"atSeq": at_seq}), 422, "INVALID_BOUNDARY")


def test_history_of_an_empty_session_has_no_boundary(client: TestClient) -> None:
    create(client, id="s")

    assert_problem(client.get("/sessions/s/history", params={"atSeq": "0"}), 422, "INVALID_BOUNDARY")
