"""POST /sessions/{id}/events (append) and GET /sessions/{id}/events (read)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from tests.api.builders import as_seed, close_turn, note, open_turn, turn, turns
from tests.api.helpers import (
    append,
    assert_invalid_request,
    assert_problem,
    create,
    events_of,
    get_session,
)

# -- append -----------------------------------------------------------------------------------------------------------


def test_append_assigns_seq_and_time_and_answers_the_session(client: TestClient) -> None:
    create(client, id="s")
    events = turn(1)

    response = client.post("/sessions/s/events", json={"events": events})

    assert response.status_code == 201
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    stored = body["events"]
    assert [event["seq"] for event in stored] == list(range(9))
    assert [{k: v for k, v in event.items() if k not in ("seq", "time")} for event in stored] == events
    times = [event["time"] for event in stored]
    assert all(isinstance(time, int) for time in times)
    assert times == sorted(times)
    assert body["session"] == get_session(client, "s")
    assert body["session"] | {"instance": None, "createdAt": None} == {
        "id": "s",
        "instance": None,
        "createdAt": None,
        "cwd": None,
        "parentSession": None,
        "seedLength": None,
        "origin": None,
        "delegationDepth": 0,
        "agentPreset": None,
        "eventCount": 9,
        "lastEventType": "turn/end",
        "openTurn": None,
        "lastTurnEndSeq": 8,
        "forkable": True,
        "updatedAt": times[-1],
        "title": None,
        "preview": "question 1",
        "bytes": body["session"]["bytes"],
        # One step with a tool round trip: model time from step/start to the message, tool time from call to result.
        "stats": {
            "turns": 1,
            "steps": 1,
            "llmMs": times[6] - times[2],
            "toolMs": times[5] - times[4],
            "ttftMs": 0,
            "ttftSteps": 0,
            "decodeMs": 0,
            "decodeTokens": 0,
        },
        "usage": {},
        "ownUsage": {},
        "archived": False,
    }
    assert events_of(client, "s") == stored


def test_appends_continue_the_seqs_and_track_the_open_turn(client: TestClient) -> None:
    create(client, id="s")
    append(client, "s", turn(1))

    opened = append(client, "s", open_turn(2))
    closed = append(client, "s", close_turn(2, kind="interrupted"))

    assert [event["seq"] for event in opened["events"]] == [9, 10, 11, 12]
    assert (opened["session"]["openTurn"], opened["session"]["lastTurnEndSeq"]) == (2, 8)
    assert (opened["session"]["lastEventType"], opened["session"]["forkable"]) == ("assistant/chunk", False)
    assert [event["seq"] for event in closed["events"]] == [13, 14, 15, 16, 17]
    assert (closed["session"]["openTurn"], closed["session"]["lastTurnEndSeq"]) == (None, 17)
    assert (closed["session"]["eventCount"], closed["session"]["forkable"]) == (18, True)


def test_an_assigned_time_is_never_before_the_previous_event(client: TestClient) -> None:
    future = 4_102_444_800_000  # 2100-01-01
    create(client, id="s", seed=as_seed(turn(1), first_time=future))

    stored = append(client, "s", [note("after the future")])["events"]

    assert stored[0]["time"] >= future + 8


def test_an_appended_event_is_stored_as_sent(client: TestClient) -> None:
    create(client, id="s")
    event = {
        "type": "forklog-test/note",
        "data": {"text": "é ☃ \U0001f600", "nested": {"list": [1, 2.5, None, True, "x"]}, "big": 9007199254740991},
        "ignorable": True,
    }

    stored = append(client, "s", [event])["events"][0]

    assert stored == {**event, "seq": 0, "time": stored["time"]}
    assert events_of(client, "s") == [stored]


def test_a_number_is_kept_as_its_value(client: TestClient) -> None:
    create(client, id="s")

    response = client.post(
        "/sessions/s/events",
        content=b'{"events": [{"type": "x/y", "data": [1.0, 1e2, 2.50, 1e-400, -1.5e-3]}]}',
        headers={"content-type": "application/json"},
    )

    assert response.status_code == 201, response.text
    assert events_of(client, "s")[0]["data"] == [1, 100, 2.5, 0, -0.0015]


def test_append_takes_1_to_1000_events(client: TestClient) -> None:
    create(client, id="s")

    assert len(append(client, "s", [note(str(index)) for index in range(1000)])["events"]) == 1000
    assert len(append(client, "s", [note("one")])["events"]) == 1

    too_many = client.post("/sessions/s/events", json={"events": [note(str(index)) for index in range(1001)]})
    assert_invalid_request(too_many, "events")
    assert_invalid_request(client.post("/sessions/s/events", json={"events": []}), "events")
    assert get_session(client, "s")["eventCount"] == 1001


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({}, id="missing"),
        pytest.param({"events": None}, id="null"),
        pytest.param({"events": {"type": "x/y", "data": 1}}, id="object"),
        pytest.param({"events": "x"}, id="string"),
    ],
)
def test_append_needs_an_events_array(client: TestClient, body: dict[str, object]) -> None:
    create(client, id="s")

    assert_invalid_request(client.post("/sessions/s/events", json=body), "events")


def test_an_append_is_atomic(client: TestClient) -> None:
    create(client, id="s", seed=turn(1))
    batch = turn(2)
    batch[4] = {"type": "tool/call", "data": {"turn": 2, "step": 1, "callId": "", "name": "x", "arguments": ""}}

    response = client.post("/sessions/s/events", json={"events": batch})

    body = assert_problem(response, 422, "INVALID_EVENT", index=4)
    assert "callId" in body["reason"]
    assert get_session(client, "s")["eventCount"] == 9
    assert len(append(client, "s", turn(2))["events"]) == 9  # the session goes on where it was


@pytest.mark.parametrize("member", ["seq", "time"])
def test_an_appended_event_must_not_carry_seq_or_time(client: TestClient, member: str) -> None:
    create(client, id="s")
    events = [note("a"), {**note("b"), member: 1}]

    body = assert_problem(client.post("/sessions/s/events", json={"events": events}), 422, "INVALID_EVENT", index=1)

    assert member in body["reason"]


def test_null_members_of_an_append_count_as_absent(client: TestClient) -> None:
    create(client, id="s")

    assert append(client, "s", [note("a")], expectedSeq=None, instance=None)["session"]["eventCount"] == 1


def test_expected_seq_guards_an_append(client: TestClient) -> None:
    create(client, id="s", seed=turn(1))

    assert [e["seq"] for e in append(client, "s", [note("a")], expectedSeq=9)["events"]] == [9]
    assert [e["seq"] for e in append(client, "s", [note("b")], expectedSeq=10.0)["events"]] == [10]
    stale = client.post("/sessions/s/events", json={"events": [note("c")], "expectedSeq": 10})
    assert_problem(stale, 409, "SEQ_CONFLICT", currentSeq=11)
    assert get_session(client, "s")["eventCount"] == 11


def test_instance_guards_an_append(client: TestClient) -> None:
    session = create(client, id="s")

    assert append(client, "s", [note("a")], instance=session["instance"])["session"]["eventCount"] == 1
    other = client.post("/sessions/s/events", json={"events": [note("b")], "instance": "not-it"})
    assert_problem(other, 409, "SESSION_NOT_LIVE")
    assert get_session(client, "s")["eventCount"] == 1


def test_the_instance_of_a_deleted_session_is_not_live(client: TestClient) -> None:
    old = create(client, id="s")
    assert client.delete("/sessions/s").status_code == 204
    create(client, id="s")

    response = client.post("/sessions/s/events", json={"events": [note("a")], "instance": old["instance"]})

    assert_problem(response, 409, "SESSION_NOT_LIVE")


# -- read -------------------------------------------------------------------------------------------------------------


def test_read_answers_every_event_by_default(client: TestClient) -> None:
    create(client, id="s")
    stored = append(client, "s", turns(2))["events"]

    response = client.get("/sessions/s/events")

    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"events": stored, "nextSeq": 18, "eventCount": 18}


def test_read_pages_with_from_and_limit(client: TestClient) -> None:
    create(client, id="s")
    stored = append(client, "s", turns(2))["events"]

    assert client.get("/sessions/s/events", params={"from": 5, "limit": 4}).json() == {
        "events": stored[5:9],
        "nextSeq": 9,
        "eventCount": 18,
    }
    assert client.get("/sessions/s/events", params={"from": 16, "limit": 4}).json() == {
        "events": stored[16:],
        "nextSeq": 18,
        "eventCount": 18,
    }
    assert client.get("/sessions/s/events", params={"from": 18}).json() == {
        "events": [],
        "nextSeq": 18,
        "eventCount": 18,
    }
    assert client.get("/sessions/s/events", params={"from": 40}).json() == {
        "events": [],
        "nextSeq": 40,
        "eventCount": 18,
    }
    assert client.get("/sessions/s/events", params={"from": "2.0", "limit": "1"}).json()["events"] == stored[2:3]


def test_read_walks_the_log_with_next_seq(client: TestClient) -> None:
    create(client, id="s")
    stored = append(client, "s", turns(3))["events"]

    seen: list[dict[str, object]] = []
    next_seq = 0
    while next_seq < 27:
        page = client.get("/sessions/s/events", params={"from": next_seq, "limit": 10}).json()
        seen += page["events"]
        next_seq = page["nextSeq"]

    assert seen == stored


def test_read_takes_up_to_10000_events(client: TestClient) -> None:
    create(client, id="s")
    for _ in range(2):
        append(client, "s", [note(str(index)) for index in range(1000)])

    assert len(client.get("/sessions/s/events", params={"limit": 10000}).json()["events"]) == 2000
    assert len(client.get("/sessions/s/events").json()["events"]) == 1000  # the default limit


def test_read_from_the_largest_seq(client: TestClient) -> None:
    create(client, id="s")

    page = client.get("/sessions/s/events", params={"from": "9007199254740991"}).json()

    assert page == {"events": [], "nextSeq": 9007199254740991, "eventCount": 0}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "10001"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"limit": "1_0"}, "limit"),
        ({"from": "-1"}, "from"),
        ({"from": "one"}, "from"),
        ({"from": "0.5"}, "from"),
        ({"from": "9007199254740992"}, "from"),  # beyond any seq: nextSeq would not be a safe integer
        ({"from": "1e20"}, "from"),
        ({"from": "0x10"}, "from"),
    ],
)
def test_read_refuses_a_bad_from_or_limit(client: TestClient, params: dict[str, str], field: str) -> None:
    create(client, id="s")

    assert_invalid_request(client.get("/sessions/s/events", params=params), field)
