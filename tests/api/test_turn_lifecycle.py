"""Spec 17 on every backend: POST /sessions/{id}/interrupt closes an abandoned turn as DSH's loader would, and every
Session carries stats, usage and ownUsage, kept as the log grows and across restarts."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient

from tests.api.builders import turn
from tests.api.conftest import ClientFactory
from tests.api.helpers import (
    NO_STATS,
    append,
    assert_invalid_request,
    assert_problem,
    create,
    events_of,
    fork,
    get_session,
)
from tests.events import agent_step, agent_turn, step_end, turn_start, user_message

STATIC = ("type", "data", "surfaceOp", "sourceEventSeqs")


def _static(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: event[key] for key in STATIC if key in event} for event in events]


def an_abandoned_turn(client: TestClient) -> list[dict[str, Any]]:
    """ "s": a finished turn, then turn 2 left in its second step: three tool calls asked for, two started (tool/call
    events), one of those answered, and one never started."""
    create(client, id="s")
    append(client, "s", agent_turn(1))
    events = [turn_start(2), user_message("go on"), *agent_step(2, 1, calls=1), step_end(2, 1)]
    events += agent_step(2, 2, calls=3, answered=1)
    events.pop(-2)  # the third call's tool/call: asked for by the model, never started
    append(client, "s", events)
    return events_of(client, "s")


def test_an_interrupt_appends_dsh_closers_as_one_batch(client: TestClient) -> None:
    log = an_abandoned_turn(client)
    message = next(event for event in reversed(log) if event["type"] == "assistant/message")
    asked = [block["id"] for block in message["data"]["message"]["content"]]
    started = {event["data"]["callId"]: event["seq"] for event in log if event["type"] == "tool/call"}
    count = len(log)

    response = client.post("/sessions/s/interrupt", json={"expectedSeq": count})

    assert response.status_code == 201
    body = response.json()
    closers = body["events"]
    assert [event["seq"] for event in closers] == [count, count + 1, count + 2, count + 3]
    assert all(event["time"] >= log[-1]["time"] for event in closers)
    unknown, not_started = asked[1], asked[2]
    assert _static(closers[:2]) == [
        {
            "type": "tool/result",
            "data": {
                "turn": 2,
                "step": 2,
                "message": {
                    "id": f"interrupted-tool-result-{unknown}-{count}",
                    "role": "user",
                    "source": {"kind": "tool", "callId": unknown},
                    "content": [
                        {
                            "type": "tool-result",
                            "toolCallId": unknown,
                            "isError": True,
                            "content": [
                                {
                                    "type": "text",
                                    "text": closers[0]["data"]["message"]["content"][0]["content"][0]["text"],
                                }
                            ],
                        }
                    ],
                },
                "error": {"name": "ToolOutcomeUnknownError", "code": "TOOL_OUTCOME_UNKNOWN"},
            },
            "surfaceOp": "append",
            "sourceEventSeqs": [started[unknown]],
        },
        {
            "type": "tool/result",
            "data": {
                "turn": 2,
                "step": 2,
                "message": {
                    "id": f"interrupted-tool-result-{not_started}-{count + 1}",
                    "role": "user",
                    "source": {"kind": "tool", "callId": not_started},
                    "content": [
                        {
                            "type": "tool-result",
                            "toolCallId": not_started,
                            "isError": True,
                            "content": [
                                {
                                    "type": "text",
                                    "text": "The tool call was interrupted before the Harness recorded it as started. "
                                    "Retry it if it is still needed.",
                                }
                            ],
                        }
                    ],
                },
                "error": {"name": "ToolNotStartedError", "code": "TOOL_NOT_STARTED"},
            },
            "surfaceOp": "append",
        },
    ]
    assert "Its outcome is unknown" in closers[0]["data"]["message"]["content"][0]["content"][0]["text"]
    assert _static(closers[2:]) == [
        {"type": "step/end", "data": {"turn": 2, "step": 2}},
        {"type": "turn/end", "data": {"turn": 2, "reason": {"kind": "interrupted"}}},
    ]
    session = body["session"]
    assert session == get_session(client, "s")
    assert (session["eventCount"], session["openTurn"], session["forkable"]) == (count + 4, None, True)
    assert events_of(client, "s") == [*log, *closers]
    fork(client, "s", sessionId="resumed")  # the interrupted turn is a boundary like any other


def test_an_interrupt_without_an_open_turn_is_not_in_turn(client: TestClient) -> None:
    create(client, id="empty")
    problem = assert_problem(client.post("/sessions/empty/interrupt"), 409, "NOT_IN_TURN")
    assert problem["lastTurnEndSeq"] is None
    create(client, id="done")
    append(client, "done", turn(1))
    problem = assert_problem(client.post("/sessions/done/interrupt", json={}), 409, "NOT_IN_TURN")
    assert problem["lastTurnEndSeq"] == 8
    assert get_session(client, "done")["eventCount"] == 9


def test_an_interrupt_with_a_stale_expected_seq_or_instance_appends_nothing(client: TestClient) -> None:
    log = an_abandoned_turn(client)
    problem = assert_problem(client.post("/sessions/s/interrupt", json={"expectedSeq": 3}), 409, "SEQ_CONFLICT")
    assert problem["currentSeq"] == len(log)
    assert_problem(client.post("/sessions/s/interrupt", json={"instance": "another"}), 409, "SESSION_NOT_LIVE")
    assert events_of(client, "s") == log
    assert_problem(client.post("/sessions/nobody/interrupt"), 404, "SESSION_NOT_FOUND")
    assert_invalid_request(client.post("/sessions/s/interrupt", json={"turn": 2}), "turn")
    assert_invalid_request(client.post("/sessions/s/interrupt", json={"expectedSeq": "3"}), "expectedSeq")


def test_an_interrupt_with_an_idempotency_key_is_replayed(client: TestClient) -> None:
    log = an_abandoned_turn(client)
    headers = {"Idempotency-Key": "close-it-once"}
    first = client.post("/sessions/s/interrupt", json={}, headers=headers)
    again = client.post("/sessions/s/interrupt", json={}, headers=headers)

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert len(events_of(client, "s")) == len(log) + 4
    assert_problem(
        client.post("/sessions/s/interrupt", json={"expectedSeq": 1}, headers=headers), 422, "IDEMPOTENCY_KEY_REUSED"
    )


def test_stats_and_usage_follow_the_log(client: TestClient) -> None:
    create(client, id="s")
    session = get_session(client, "s")
    assert (session["stats"], session["usage"], session["ownUsage"]) == (NO_STATS, {}, {})

    stored = append(client, "s", agent_turn(1, steps=2))["events"]
    session = get_session(client, "s")
    time = {event["seq"]: event["time"] for event in stored}
    by_type: dict[str, list[int]] = {}
    for event in stored:
        by_type.setdefault(event["type"], []).append(event["seq"])
    step_starts, messages = by_type["step/start"], by_type["assistant/message"]
    # The first token of a step is its first non-empty delta (the empty reasoning delta is not one).
    first_tokens = [start + 2 for start in step_starts[:2]] + [step_starts[2] + 1]
    calls = {event["data"]["callId"]: event["seq"] for event in stored if event["type"] == "tool/call"}
    results = {
        event["data"]["message"]["source"]["callId"]: event["seq"] for event in stored if event["type"] == "tool/result"
    }
    assert session["stats"] == {
        "turns": 1,
        "steps": 3,
        "llmMs": sum(time[m] - time[s] for s, m in zip(step_starts, messages, strict=True)),
        "toolMs": sum(time[results[call]] - time[seq] for call, seq in calls.items()),
        "ttftMs": sum(time[f] - time[s] for s, f in zip(step_starts, first_tokens, strict=True)),
        "ttftSteps": 3,
        # Decode time only on the steps whose message reports outputTokens (the two tool steps).
        "decodeMs": sum(time[m] - time[f] for m, f in zip(messages[:2], first_tokens[:2], strict=True)),
        "decodeTokens": 14,
    }
    tokens = {"inputTokens": 300, "outputTokens": 14, "cacheReadTokens": 6, "reasoningTokens": 4}
    assert session["usage"] == session["ownUsage"] == tokens

    append(client, "s", agent_turn(2, steps=1))
    twice = {"inputTokens": 400, "outputTokens": 21, "cacheReadTokens": 9, "reasoningTokens": 6}
    session = get_session(client, "s")
    assert (session["stats"]["turns"], session["stats"]["steps"], session["usage"]) == (2, 5, twice)

    # A fork's child has its parent's figures at the boundary, and its own usage starts after the seed.
    child = fork(client, "s", sessionId="child", atTurn=1)
    assert child["stats"]["steps"] == 3 and child["usage"] == tokens and child["ownUsage"] == {}
    grown = append(client, "child", agent_turn(2, steps=1))["session"]
    assert grown["usage"] == twice and grown["ownUsage"] == {key: twice[key] - tokens[key] for key in twice}
    assert grown["stats"]["turns"] == 2
    edited = fork(client, "s", sessionId="edited", atTurn=1, events=agent_turn(2, steps=1))
    assert edited["ownUsage"] == grown["ownUsage"] and edited["usage"] == twice
    listed = {item["id"]: item for item in client.get("/sessions").json()["items"]}
    assert listed["child"] == get_session(client, "child")


def test_stats_and_open_turns_survive_a_restart(make_client: ClientFactory) -> None:
    first = make_client()
    an_abandoned_turn(first)
    fork(first, "s", sessionId="fork1", atTurn=1)
    before = {session_id: get_session(first, session_id) for session_id in ("s", "fork1")}
    first.__exit__(None, None, None)

    again = make_client()
    for session_id, was in before.items():
        assert get_session(again, session_id) == was
    closed = again.post("/sessions/s/interrupt").json()["events"]
    assert [event["type"] for event in closed] == ["tool/result", "tool/result", "step/end", "turn/end"]
    assert append(again, "fork1", agent_turn(2, steps=1))["session"]["ownUsage"]["inputTokens"] == 100
