"""The event rules of spec 1.1-1.4, checked through the store exactly as a client meets them.

Most rules apply alike to a seed (``prepare_create``) and to an appended batch (``prepare_append``); those tests run
in both modes (``mode`` fixture) and expect the rejection to name the same index, with INVALID_SEED or INVALID_EVENT.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

from app.backends.catalog import LiveSession as Session
from app.domain.errors import ErrorCode, SessionError
from app.domain.jsonvalue import loads
from tests.domain.builders import (
    T0,
    Clock,
    append,
    assistant_chunk,
    assistant_data,
    assistant_message,
    create,
    event,
    fork,
    make_store,
    not_started_result,
    numbered,
    replace,
    request_header,
    simple_turn,
    step_end,
    step_start,
    title,
    tool_call,
    tool_result,
    tool_result_data,
    tool_turn,
    turn_end,
    turn_start,
    turns,
    user_data,
    user_message,
)

IN_TURN = [turn_start(1)]
IN_STEP = [turn_start(1), step_start(1, 1)]


@pytest.fixture(params=["seed", "append"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def submit(mode: str, events: Sequence[Any], *, breaks: dict[int, str] | None = None, clock: Clock | None = None):
    """Store ``events`` as a seed or as one appended batch of a fresh session; return the session."""
    store = make_store(clock)
    if mode == "seed":
        return create(store, "s", events, seed_breaks=breaks)
    create(store, "s")
    append(store, "s", events, breaks=breaks)
    return store.get("s")


def rejected_at(
    mode: str, events: Sequence[Any], index: int, fragment: str = "", *, breaks: dict[int, str] | None = None
) -> str:
    """Submit ``events``; they must be refused naming ``index`` with a reason containing ``fragment``."""
    store = make_store()
    if mode == "append":
        create(store, "s")
    with pytest.raises(SessionError) as caught:
        if mode == "seed":
            store.create("s", events, seed_breaks=breaks)
        else:
            store.append("s", events, breaks=breaks)
    error = caught.value
    assert error.code == (ErrorCode.INVALID_SEED if mode == "seed" else ErrorCode.INVALID_EVENT), repr(error)
    assert error.facts["index"] == index, repr(error)
    reason = error.facts["reason"]
    assert isinstance(reason, str)
    assert reason.strip()
    assert fragment in reason, repr(error)
    if mode == "seed":
        assert "s" not in store
    else:
        assert len(store.get("s").log) == 0
    return str(reason)


def stored(session: Session) -> list[dict[str, Any]]:
    return session.log.events()


def history(session: Session) -> list[Any]:
    return session.log.history()


# -- the envelope --------------------------------------------------------------------------------------------------

ENVELOPE_BREAKS = [
    pytest.param({**title(), "color": "red"}, "'color'", id="unknown-key"),
    pytest.param({**title(), "Type": "x"}, "'Type'", id="unknown-key-case"),
    pytest.param(event("", None), "empty", id="type-empty"),
    pytest.param(event("x" * 257, None), "257", id="type-257-chars"),
    pytest.param(event("\U0001f600" * 257, None), "257", id="type-257-code-points"),
    pytest.param(event("session", {}), "storage tag", id="tag-session"),
    pytest.param(event("text-chunks", {}), "storage tag", id="tag-text-chunks"),
    pytest.param(event("reasoning-chunks", {}), "storage tag", id="tag-reasoning-chunks"),
    pytest.param(event("tool-call-chunks", {}), "storage tag", id="tag-tool-call-chunks"),
    pytest.param(event(5, {}), "'type'", id="type-number"),  # type: ignore[arg-type]
    pytest.param(event(None, {}), "'type'", id="type-null"),  # type: ignore[arg-type]
    pytest.param(event(["turn/start"], {}), "'type'", id="type-array"),  # type: ignore[arg-type]
    pytest.param({"data": {}}, "'type'", id="type-missing"),
    pytest.param({"type": "x/y"}, "'data'", id="data-missing"),
    pytest.param({**title(), "ignorable": False}, "ignorable", id="ignorable-false"),
    pytest.param({**title(), "ignorable": "yes"}, "ignorable", id="ignorable-yes"),
    pytest.param({**title(), "ignorable": 1}, "ignorable", id="ignorable-1"),
    pytest.param({**title(), "ignorable": None}, "ignorable", id="ignorable-null"),
    pytest.param("turn/start", "object", id="event-string"),
    pytest.param([], "object", id="event-array"),
    pytest.param(None, "object", id="event-null"),
]


@pytest.mark.parametrize(("bad", "fragment"), ENVELOPE_BREAKS)
def test_envelope_breaks_are_refused(mode: str, bad: Any, fragment: str) -> None:
    rejected_at(mode, [title(), bad], 1, fragment)


@pytest.mark.parametrize(
    "kind",
    ["x" * 256, "\U0001f600" * 256, "a", "plugin/thing", "UPPER/case", "no-slash", "session/", "tool-call-chunk"],
)
def test_any_other_type_up_to_256_code_points_is_a_log_only_event(mode: str, kind: str) -> None:
    session = submit(mode, [event(kind, {"anything": [1, None]})])
    assert stored(session)[0]["type"] == kind


def test_data_may_be_null_or_any_json_where_the_type_does_not_constrain_it(mode: str) -> None:
    values = [None, 0, "x", [1, [2]], {"nested": {"k": None}}, True]
    session = submit(mode, [event("plugin/x", value) for value in values])
    assert [item["data"] for item in stored(session)] == values


def test_ignorable_true_is_kept(mode: str) -> None:
    session = submit(mode, [{**event("plugin/new", {}), "ignorable": True}, title()])
    first, second = stored(session)
    assert first["ignorable"] is True
    assert "ignorable" not in second


@pytest.mark.parametrize("key", ["seq", "time"])
def test_an_appended_event_must_not_carry_seq_or_time(key: str) -> None:
    store = make_store()
    create(store, "s")
    append(store, "s", [title()])
    # even the value the server would assign is refused
    bad = {**title(), key: 1 if key == "seq" else T0}
    error = store_refusal(store, [title(), bad])
    assert error.facts["index"] == 1
    assert "seq" in error.facts["reason"]
    assert len(store.get("s").log) == 1


def store_refusal(store: Any, events: list[Any]) -> SessionError:
    with pytest.raises(SessionError) as caught:
        store.append("s", events)
    assert caught.value.code == ErrorCode.INVALID_EVENT
    return caught.value


# -- seq and time in seeds -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad_seq", [1, 5, "0", 0.5, -1, True, None, [0]])
def test_a_seed_seq_must_equal_its_index(bad_seq: Any) -> None:
    rejected_at("seed", [{**title(), "seq": bad_seq, "time": T0}], 0, "seq")


def test_a_non_contiguous_seed_is_refused_at_the_gap() -> None:
    # facts 9.2: "rejects a non-contiguous seq" (seq 0 then 5)
    rejected_at("seed", [{**title(), "seq": 0, "time": T0}, {**title(), "seq": 5, "time": T0}], 1, "index 1")


def test_non_monotonic_seed_seqs_are_refused() -> None:
    # facts 9.3: "rejects non-monotonic seqs"
    seed = numbered([title(), title(), title()])
    seed[1]["seq"], seed[2]["seq"] = 2, 1
    rejected_at("seed", seed, 1, "seq")


def test_an_integral_float_seq_counts_as_the_integer() -> None:
    session = submit("seed", [{**title(), "seq": 0.0, "time": T0}, {**title(), "seq": 1.0, "time": 5.0}])
    assert [(item["seq"], item["time"]) for item in stored(session)] == [(0, T0), (1, 5)]


@pytest.mark.parametrize("bad_time", ["5", 0.5, 2**53, -(2**53), None, True, {"ms": 1}])
def test_a_seed_time_must_be_a_safe_integer(bad_time: Any) -> None:
    rejected_at("seed", [{**title(), "seq": 0, "time": bad_time}], 0, "time")


def test_seed_times_may_be_any_safe_integers_in_any_order() -> None:
    times = [T0, -5, 0, 2**53 - 1, -(2**53 - 1), 7]
    seed = [{**title(), "seq": i, "time": t} for i, t in enumerate(times)]
    session = submit("seed", seed)
    assert [item["time"] for item in stored(session)] == times


def test_seed_events_without_seq_or_time_get_them_assigned() -> None:
    clock = Clock(T0 + 100)
    seed = [
        title(),
        {**title(), "seq": 1},
        {**title(), "time": T0 - 50},
        {**title(), "seq": 3, "time": T0 + 400},
        title(),
    ]
    session = submit("seed", seed, clock=clock)
    assert [(item["seq"], item["time"]) for item in stored(session)] == [
        (0, T0 + 100),
        (1, T0 + 100),
        (2, T0 - 50),
        (3, T0 + 400),
        (4, T0 + 400),  # never before the previous event, even when the clock is behind it
    ]


def test_an_assigned_time_is_never_before_the_previous_event_even_after_a_future_seed() -> None:
    clock = Clock(T0)
    store = make_store(clock)
    future = T0 + 86_400_000
    create(store, "s", [{**title(), "seq": 0, "time": future}])
    first = append(store, "s", [title()])
    assert first[0]["time"] == future
    clock.now = future + 10
    second = append(store, "s", [title(), title()])
    assert [item["time"] for item in second] == [future + 10, future + 10]
    clock.now = T0  # the clock steps back
    third = append(store, "s", [title()])
    assert third[0]["time"] == future + 10


def test_appended_events_get_consecutive_seqs_and_the_current_time() -> None:
    clock = Clock(T0)
    store = make_store(clock)
    create(store, "s", [title(), title()])
    clock.now = T0 + 5
    stored_events = append(store, "s", simple_turn(1))
    assert [item["seq"] for item in stored_events] == list(range(2, 10))
    assert {item["time"] for item in stored_events} == {T0 + 5}
    assert stored_events == store.get("s").log.events(2)


# -- the core vocabulary -------------------------------------------------------------------------------------------

user_without = {key: {k: v for k, v in user_data().items() if k != key} for key in ("id", "role", "content", "source")}
assistant_in_step = {"turn": 1, "step": 1}


def with_message(kind: str, message: Any) -> dict[str, Any]:
    if kind == "user/message":
        return event(kind, message, surfaceOp="append")
    return event(kind, {**assistant_in_step, "message": message}, surfaceOp="append")


def assistant_with(**changes: Any) -> dict[str, Any]:
    message = assistant_data("x")
    for key, value in changes.items():
        if value is None:
            message.pop(key, None)
        else:
            message[key] = value
    return with_message("assistant/message", message)


def result_with(call_id: str = "c1", **changes: Any) -> dict[str, Any]:
    data = tool_result_data(1, 1, call_id)
    message = data["message"]
    for key, value in changes.items():
        message[key] = value
    return event("tool/result", data, surfaceOp="append")


def result_block(**changes: Any) -> dict[str, Any]:
    data = tool_result_data(1, 1, "c1")
    block = data["message"]["content"][0]
    for key, value in changes.items():
        if value is None:
            block.pop(key)
        else:
            block[key] = value
    return event("tool/result", data, surfaceOp="append")


def header_with(config: Any = None, **header: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"header": {"config": config, **header}, "reason": "initial"}
    if config is None:
        del data["header"]["config"]
    return event("request/header", data)


CALLED = [*IN_STEP, tool_call(1, 1, "c1")]

VOCABULARY_BREAKS = [
    # turn/start
    pytest.param([turn_start(2)], 0, "expected turn 1, got 2", id="turn-start-first-not-1"),
    pytest.param([turn_start(1), turn_start(2)], 1, "still open", id="turn-start-while-open"),
    pytest.param([*simple_turn(1), turn_start(3)], 8, "expected turn 2, got 3", id="turn-start-skips"),
    pytest.param([*simple_turn(1), turn_start(1)], 8, "expected turn 2, got 1", id="turn-start-repeats"),
    pytest.param([turn_start("1")], 0, "expected turn 1", id="turn-start-string"),
    pytest.param([turn_start(True)], 0, "expected turn 1", id="turn-start-true"),
    pytest.param([event("turn/start", {})], 0, "got undefined", id="turn-start-no-turn"),
    pytest.param([event("turn/start", None)], 0, "turn", id="turn-start-null-data"),
    pytest.param([event("turn/start", [1])], 0, "turn", id="turn-start-array-data"),
    # turn/end
    pytest.param([turn_end(1)], 0, "does not match open turn null", id="turn-end-no-open-turn"),
    pytest.param([turn_start(1), turn_end(2)], 1, "does not match open turn 1", id="turn-end-wrong-turn"),
    pytest.param([*IN_STEP, turn_end(1)], 2, "step 1 is still open", id="turn-end-step-open"),
    pytest.param([turn_start(1), event("turn/end", {"turn": 1})], 1, "reason", id="turn-end-no-reason"),
    pytest.param([turn_start(1), event("turn/end", {"turn": 1, "reason": {}})], 1, "kind", id="turn-end-empty-reason"),
    pytest.param(
        [turn_start(1), event("turn/end", {"turn": 1, "reason": {"kind": 5}})], 1, "kind", id="turn-end-kind-number"
    ),
    pytest.param(
        [turn_start(1), event("turn/end", {"turn": 1, "reason": {"kind": None}})], 1, "kind", id="turn-end-kind-null"
    ),
    pytest.param(
        [turn_start(1), event("turn/end", {"turn": 1, "reason": "completed"})], 1, "reason", id="turn-end-reason-str"
    ),
    pytest.param([turn_start(1), event("turn/end", None)], 1, "reason", id="turn-end-null-data"),
    # step/start
    pytest.param([step_start(1, 1)], 0, "open turn is null", id="step-start-outside-turn"),
    pytest.param([turn_start(1), step_start(2, 1)], 1, "open turn is 1", id="step-start-wrong-turn"),
    pytest.param([turn_start(1), step_start(1, 2)], 1, "expected step 1", id="step-start-first-not-1"),
    pytest.param([*IN_STEP, step_start(1, 2)], 2, "step 1 is still open", id="step-start-while-open"),
    pytest.param(
        [*IN_STEP, step_end(1, 1), step_start(1, 3)], 3, "expected step 2 in turn 1, got 3", id="step-start-skips"
    ),
    pytest.param([turn_start(1), step_start(1, "1")], 1, "expected step 1", id="step-start-string"),
    # step/end
    pytest.param([turn_start(1), step_end(1, 1)], 1, "open is turn 1/step null", id="step-end-no-step"),
    pytest.param([*IN_STEP, step_end(1, 2)], 2, "names turn 1/step 2", id="step-end-wrong-step"),
    pytest.param([*IN_STEP, step_end(2, 1)], 2, "names turn 2/step 1", id="step-end-wrong-turn"),
    pytest.param([step_end(1, 1)], 0, "open is turn null/step null", id="step-end-outside-turn"),
    # user/message shapes
    pytest.param([with_message("user/message", user_without["id"])], 0, "identified", id="user-no-id"),
    pytest.param([with_message("user/message", {**user_data(), "id": ""})], 0, "identified", id="user-empty-id"),
    pytest.param([with_message("user/message", {**user_data(), "id": 7})], 0, "identified", id="user-number-id"),
    pytest.param([with_message("user/message", user_without["role"])], 0, "role", id="user-no-role"),
    pytest.param([with_message("user/message", {**user_data(), "role": "assistant"})], 0, "role", id="user-role"),
    pytest.param([with_message("user/message", {**user_data(), "role": "system"})], 0, "role", id="user-system"),
    pytest.param([with_message("user/message", user_without["content"])], 0, "content", id="user-no-content"),
    pytest.param([with_message("user/message", {**user_data(), "content": "hi"})], 0, "content", id="user-str-body"),
    pytest.param([with_message("user/message", user_without["source"])], 0, "source", id="user-no-source"),
    pytest.param([with_message("user/message", {**user_data(), "source": "user"})], 0, "source", id="user-source-str"),
    pytest.param([with_message("user/message", {**user_data(), "source": {}})], 0, "source", id="user-source-no-kind"),
    pytest.param(
        [with_message("user/message", {**user_data(), "source": {"kind": ""}})], 0, "source", id="user-source-empty"
    ),
    pytest.param([with_message("user/message", "hello")], 0, "identified", id="user-data-string"),
    pytest.param([with_message("user/message", None)], 0, "identified", id="user-data-null"),
    # assistant/chunk
    pytest.param([assistant_chunk(1, 1)], 0, "open is turn null/step null", id="chunk-outside-turn"),
    pytest.param([*IN_TURN, assistant_chunk(1, 1)], 1, "open is turn 1/step null", id="chunk-outside-step"),
    pytest.param([*IN_STEP, assistant_chunk(1, 2)], 2, "names turn 1/step 2", id="chunk-wrong-step"),
    pytest.param([*IN_STEP, event("assistant/chunk", {"turn": 1, "step": 1})], 2, "chunk", id="chunk-missing"),
    pytest.param(
        [*IN_STEP, event("assistant/chunk", {"turn": 1, "step": 1, "chunk": "hi"})], 2, "chunk", id="chunk-string"
    ),
    pytest.param(
        [*IN_STEP, event("assistant/chunk", {"turn": 1, "step": 1, "chunk": None})], 2, "chunk", id="chunk-null"
    ),
    # assistant/message
    pytest.param([assistant_message(1, 1)], 0, "open is turn null/step null", id="assistant-outside-turn"),
    pytest.param([*IN_TURN, assistant_message(1, 1)], 1, "open is turn 1/step null", id="assistant-outside-step"),
    pytest.param([*IN_STEP, assistant_message(1, 2)], 2, "names turn 1/step 2", id="assistant-wrong-step"),
    pytest.param([*IN_STEP, assistant_with(role="user")], 2, "role", id="assistant-role"),
    pytest.param([*IN_STEP, assistant_with(id=None)], 2, "identified", id="assistant-no-id"),
    pytest.param([*IN_STEP, assistant_with(content=None)], 2, "content", id="assistant-no-content"),
    pytest.param([*IN_STEP, assistant_with(source={"kind": "user"})], 2, "model", id="assistant-source-user"),
    pytest.param([*IN_STEP, assistant_with(source={"kind": "model"})], 2, "provider", id="assistant-pre-provider"),
    pytest.param(
        [*IN_STEP, assistant_with(source={"kind": "model", "provider": "", "model": "m"})],
        2,
        "provider",
        id="assistant-provider-empty",
    ),
    pytest.param(
        [*IN_STEP, assistant_with(source={"kind": "model", "provider": "p", "model": 5})],
        2,
        "model",
        id="assistant-model-number",
    ),
    pytest.param(
        [*IN_STEP, event("assistant/message", assistant_in_step, surfaceOp="append")],
        2,
        "message",
        id="assistant-no-message",
    ),
    # tool/call
    pytest.param([tool_call(1, 1, "c1")], 0, "open is turn null/step null", id="call-outside-turn"),
    pytest.param([*IN_TURN, tool_call(1, 1, "c1")], 1, "open is turn 1/step null", id="call-outside-step"),
    pytest.param([*IN_STEP, tool_call(1, 2, "c1")], 2, "names turn 1/step 2", id="call-wrong-step"),
    pytest.param([*IN_STEP, tool_call(1, 1, "")], 2, "callId", id="call-empty-id"),
    pytest.param(
        [*IN_STEP, event("tool/call", {"turn": 1, "step": 1, "callId": 5, "name": "n", "arguments": "{}"})],
        2,
        "callId",
        id="call-number-id",
    ),
    pytest.param(
        [*IN_STEP, event("tool/call", {"turn": 1, "step": 1, "name": "n", "arguments": "{}"})],
        2,
        "callId",
        id="call-no-id",
    ),
    pytest.param(
        [*IN_STEP, event("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": 1, "arguments": "{}"})],
        2,
        "name",
        id="call-number-name",
    ),
    pytest.param(
        [*IN_STEP, event("tool/call", {"turn": 1, "step": 1, "callId": "c", "arguments": "{}"})],
        2,
        "name",
        id="call-no-name",
    ),
    pytest.param(
        [*IN_STEP, event("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "n", "arguments": {}})],
        2,
        "arguments",
        id="call-object-arguments",
    ),
    pytest.param(
        [*IN_STEP, event("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "n"})],
        2,
        "arguments",
        id="call-no-arguments",
    ),
    # tool/result shapes
    pytest.param([*CALLED, result_with(role="assistant")], 3, "role", id="result-role"),
    pytest.param([*CALLED, result_with(source={"kind": "user"})], 3, "source", id="result-source-user"),
    pytest.param([*CALLED, result_with(source={"kind": "tool", "callId": ""})], 3, "callId", id="result-empty-call"),
    pytest.param([*CALLED, result_with(source={"kind": "tool"})], 3, "callId", id="result-no-call-id"),
    pytest.param([*CALLED, result_with(content=[])], 3, "exactly one", id="result-no-block"),
    pytest.param(
        [*CALLED, result_with(content=[*tool_result_data(1, 1, "c1")["message"]["content"]] * 2)],
        3,
        "exactly one",
        id="result-two-blocks",
    ),
    pytest.param([*CALLED, result_block(type="text")], 3, "exactly one", id="result-block-type"),
    pytest.param([*CALLED, result_block(content=None)], 3, "exactly one", id="result-block-no-content"),
    pytest.param([*CALLED, result_block(content="ok")], 3, "exactly one", id="result-block-content-str"),
    pytest.param([*CALLED, result_block(toolCallId="c2")], 3, "toolCallId", id="result-call-id-correlation"),
    pytest.param([*CALLED, result_block(toolCallId=None)], 3, "toolCallId", id="result-no-tool-call-id"),
    pytest.param(
        [*CALLED, event("tool/result", {"turn": 1, "step": 1}, surfaceOp="append")],
        3,
        "identified",
        id="result-no-message",
    ),
    # tool/result relations
    pytest.param([*IN_STEP, tool_result(1, 1, "c1")], 2, "no prior tool/call", id="result-without-call"),
    pytest.param([*CALLED, tool_result(1, 1, "c2")], 3, "tool/result for c2 with no prior", id="result-other-call"),
    pytest.param(
        [*CALLED, step_end(1, 1), step_start(1, 2), tool_result(1, 2, "c1")],
        5,
        "no prior tool/call in this step",
        id="result-in-a-later-step",
    ),
    pytest.param(
        [*CALLED, tool_result(1, 1, "c1"), tool_result(1, 1, "c1")], 4, "no prior tool/call", id="result-answered-twice"
    ),
    pytest.param(
        [*CALLED, tool_call(1, 1, "c1"), tool_result(1, 1, "c1"), tool_result(1, 1, "c1")],
        5,
        "no prior tool/call",
        id="result-duplicate-call-id-is-one-call",
    ),
    pytest.param(
        [*CALLED, step_end(1, 1), tool_result(1, 1, "c1")], 4, "open is turn 1/step null", id="result-after-step-end"
    ),
    pytest.param([*CALLED, tool_result(1, 2, "c1")], 3, "names turn 1/step 2", id="result-wrong-step"),
    pytest.param(
        [*IN_STEP, tool_result(1, 1, "c1", is_error=False, error_code="TOOL_NOT_STARTED")],
        2,
        "no prior tool/call",
        id="not-started-without-is-error",
    ),
    pytest.param(
        [*IN_STEP, tool_result(1, 1, "c1", error_code="TOOL_NOT_STARTED")],
        2,
        "no prior tool/call",
        id="not-started-is-error-absent",
    ),
    pytest.param(
        [*IN_STEP, tool_result(1, 1, "c1", is_error=True, error_code="TOOL_OUTCOME_UNKNOWN")],
        2,
        "no prior tool/call",
        id="other-error-code",
    ),
    pytest.param(
        [*IN_STEP, tool_result(1, 1, "c1", is_error=True)], 2, "no prior tool/call", id="is-error-without-code"
    ),
    pytest.param(
        [*IN_TURN, not_started_result(1, 1, "c1")], 1, "open is turn 1/step null", id="not-started-outside-step"
    ),
    # request/header
    pytest.param([request_header()], 0, "outside any open turn", id="header-outside-turn"),
    pytest.param([*IN_TURN, request_header(provider="")], 1, "provider", id="header-provider-empty"),
    pytest.param([*IN_TURN, header_with({"provider": "p"})], 1, "provider and model", id="header-no-model"),
    pytest.param([*IN_TURN, header_with({"model": "m"})], 1, "provider and model", id="header-pre-provider"),
    pytest.param([*IN_TURN, header_with()], 1, "config", id="header-no-config"),
    pytest.param([*IN_TURN, event("request/header", {"reason": "initial"})], 1, "config", id="header-no-header"),
    pytest.param([*IN_TURN, event("request/header", None)], 1, "config", id="header-null-data"),
    pytest.param(
        [*IN_TURN, request_header(config={"reasoningEffort": ""})], 1, "reasoningEffort", id="header-effort-empty"
    ),
    pytest.param(
        [*IN_TURN, request_header(config={"reasoningEffort": 3})], 1, "reasoningEffort", id="header-effort-number"
    ),
    pytest.param(
        [*IN_TURN, request_header(adapterDefaults={"temperature": True}, config={"temperature": 1})],
        1,
        "adapterDefaults",
        id="defaults-unknown-key",
    ),
    pytest.param(
        [*IN_TURN, request_header(adapterDefaults={"maxTokens": True})],
        1,
        "adapterDefaults",
        id="defaults-without-config-field",
    ),
    pytest.param(
        [*IN_TURN, request_header(adapterDefaults={"reasoningEffort": True})],
        1,
        "adapterDefaults",
        id="defaults-effort-without-config-field",
    ),
    pytest.param(
        [*IN_TURN, request_header(adapterDefaults={"maxTokens": False}, config={"maxTokens": 10})],
        1,
        "adapterDefaults",
        id="defaults-false",
    ),
    pytest.param([*IN_TURN, request_header(adapterDefaults=True)], 1, "adapterDefaults", id="defaults-not-object"),
    pytest.param(
        [*IN_TURN, event("request/header", {**request_header()["data"], "reason": "fallback"})],
        1,
        "fallback",
        id="header-fallback",
    ),
    # turn-enclosed and legacy
    pytest.param([event("todo/write", {"todos": []})], 0, "outside any open turn", id="todo-outside-turn"),
    pytest.param([*simple_turn(1), event("todo/write", None)], 8, "outside any open turn", id="todo-between-turns"),
    pytest.param(
        [event("request/context", {"provider": "p", "model": "m"})],
        0,
        "outside any open turn",
        id="context-outside-turn",
    ),
    pytest.param([event("request/header-delta", {})], 0, "legacy", id="header-delta-outside"),
    pytest.param([*IN_STEP, event("request/header-delta", {})], 2, "legacy", id="header-delta-in-step"),
]


@pytest.mark.parametrize(("events", "index", "fragment"), VOCABULARY_BREAKS)
def test_core_vocabulary_breaks_are_refused(mode: str, events: list[Any], index: int, fragment: str) -> None:
    rejected_at(mode, copy.deepcopy(events), index, fragment)


VOCABULARY_ACCEPTED = [
    pytest.param([user_message("idle context")], id="user-message-outside-turn"),
    pytest.param([*IN_TURN, user_message()], id="user-message-in-turn-outside-step"),
    pytest.param([*IN_STEP, user_message()], id="user-message-in-step"),
    pytest.param([event("session/end-seed", {})], id="end-seed-outside-turn"),
    pytest.param([*IN_STEP, event("session/end-seed", None)], id="end-seed-in-open-step"),
    pytest.param([title(), *IN_STEP, event("plugin/x", 1), step_end(1, 1), title()], id="plugin-events-anywhere"),
    pytest.param([*IN_TURN, event("todo/write", None), event("request/context", "anything")], id="unchecked-data"),
    pytest.param([*IN_TURN, turn_end(1)], id="turn-without-steps"),
    pytest.param(
        [event("turn/start", {"turn": 1, "trigger": "user"}), event("turn/end", {"turn": 1, "reason": {"kind": "x"}})],
        id="extra-data-keys",
    ),
    pytest.param(
        [
            *IN_TURN,
            request_header(
                config={"reasoningEffort": "high", "maxTokens": 100},
                adapterDefaults={"reasoningEffort": True, "maxTokens": True},
                system="be brief",
                tools=[],
            ),
            event("request/header", {**request_header()["data"], "reason": "change"}),
            request_header(adapterDefaults={}),
        ],
        id="request-headers",
    ),
    pytest.param(
        [*IN_STEP, assistant_message(1, 1, "partial", data_extra={"usage": {"inputTokens": 1}, "interrupted": True})],
        id="assistant-extra-keys",
    ),
    pytest.param(
        [*IN_STEP, assistant_message(1, 1, data_extra={"usage": 1, "interrupted": "yes"})],
        id="assistant-unchecked-usage",
    ),
    pytest.param([*IN_STEP, event("assistant/chunk", {"turn": 1, "step": 1, "chunk": {}})], id="chunk-any-object"),
    pytest.param(
        [*IN_STEP, tool_call(1, 1, "c1"), tool_call(1, 1, "c2"), tool_result(1, 1, "c2"), tool_result(1, 1, "c1")],
        id="results-in-any-order",
    ),
    pytest.param(
        [*IN_STEP, tool_call(1, 1, "c1"), tool_call(1, 1, "c2"), step_end(1, 1), turn_end(1)],
        id="unresolved-calls-at-step-end",
    ),
    pytest.param(
        [
            *IN_STEP,
            tool_call(1, 1, "c1"),
            tool_result(1, 1, "c1"),
            step_end(1, 1),
            step_start(1, 2),
            tool_call(1, 2, "c1"),
            tool_result(1, 2, "c1"),
        ],
        id="same-call-id-in-another-step",
    ),
    pytest.param([*IN_STEP, not_started_result(1, 1, "never-called")], id="tool-not-started"),
    pytest.param(
        [
            *IN_STEP,
            tool_call(1, 1, "c1"),
            not_started_result(1, 1, "c1"),
            tool_result(1, 1, "c2", is_error=True, error_code="TOOL_NOT_STARTED"),
        ],
        id="tool-not-started-twice",
    ),
    pytest.param(
        [
            *IN_STEP,
            tool_call(1, 1, "c1"),
            event(
                "tool/result",
                {**tool_result_data(1, 1, "c1"), "error": "odd", "meta": {"any": [1]}},
                surfaceOp="append",
            ),
        ],
        id="result-unchecked-error-and-meta",
    ),
    pytest.param([*turns(4), user_message("between"), title(), *turns(2, first=5)], id="many-turns"),
]


@pytest.mark.parametrize("events", VOCABULARY_ACCEPTED)
def test_core_vocabulary_accepts(mode: str, events: list[Any]) -> None:
    session = submit(mode, copy.deepcopy(events))
    assert [item["type"] for item in stored(session)] == [item["type"] for item in events]
    assert [item["seq"] for item in stored(session)] == list(range(len(events)))


@pytest.mark.parametrize(
    "reason",
    [
        {"kind": "completed"},
        {"kind": "aborted", "reason": {"kind": "user"}},
        {"kind": "aborted", "reason": {"kind": "hook", "reason": "policy"}},
        {"kind": "blocked"},
        {"kind": "error", "error": {"message": "boom", "code": "UNKNOWN"}},
        {"kind": "max-tokens"},
        {"kind": "interrupted"},
        {"kind": "paused-by-operator", "extra": [1]},
        {"kind": ""},
    ],
)
def test_every_turn_end_reason_kind_is_accepted_and_round_trips(mode: str, reason: dict[str, Any]) -> None:
    # facts 9.2: "round-trips an aborted turn with its cancellation cause", "... a max-tokens turn/end reason"
    session = submit(mode, [turn_start(1), event("turn/end", {"turn": 1, "reason": reason})])
    assert stored(session)[1]["data"] == {"turn": 1, "reason": reason}
    assert session.view().head.open_turn is None


# -- numbers as JSON values ----------------------------------------------------------------------------------------


def test_one_and_one_point_zero_are_the_same_number(mode: str) -> None:
    events = [
        turn_start(1.0),
        step_start(1, 1.0),
        assistant_message(1.0, 1),
        tool_call(1, 1.0, "c1"),
        tool_result(1.0, 1.0, "c1"),
        step_end(1.0, 1),
        step_start(1.0, 2),
        step_end(1, 2.0),
        turn_end(1.0),
        turn_start(2),
        turn_end(2.0),
    ]
    session = submit(mode, events)
    assert session.view().head.open_turn is None
    assert session.view().head.last_turn_end_seq == 10


@pytest.mark.parametrize("other", ["1", True, [1], {"n": 1}, None])
def test_one_differs_from_a_string_a_boolean_or_a_container(mode: str, other: Any) -> None:
    rejected_at(mode, [turn_start(1), step_start(1, other)], 1, "step")
    rejected_at(mode, [turn_start(1), step_start(1, 1), step_end(1, other)], 2, "names turn 1/step")
    rejected_at(mode, [turn_start(1), turn_end(other)], 1, "does not match open turn 1")


def test_open_turn_is_reported_as_an_integer() -> None:
    session = submit("seed", [turn_start(1.0)])
    assert session.view().head.open_turn == 1
    assert type(session.view().head.open_turn) is int


# -- surface metadata ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([{k: v for k, v in user_message().items() if k != "surfaceOp"}], id="user/message"),
        pytest.param(
            [*IN_STEP, {k: v for k, v in assistant_message(1, 1).items() if k != "surfaceOp"}], id="assistant/message"
        ),
        pytest.param(
            [*CALLED, {k: v for k, v in tool_result(1, 1, "c1").items() if k != "surfaceOp"}], id="tool/result"
        ),
    ],
)
def test_surface_events_require_a_surface_op(mode: str, events: list[Any]) -> None:
    rejected_at(mode, copy.deepcopy(events), len(events) - 1, "requires surfaceOp")


@pytest.mark.parametrize(
    "surface_op",
    ["Append", "replace", "", 5, None, True, [], ["append"], {"op": "append"}],
)
def test_an_invalid_surface_op_is_refused(mode: str, surface_op: Any) -> None:
    rejected_at(mode, [user_message(surface_op=surface_op)], 0, "surfaceOp")


@pytest.mark.parametrize(
    "surface_op",
    [
        {"op": "replace", "start": 0, "end": 0, "why": "x"},
        {"op": "replace", "start": 0},
        {"op": "replace", "end": 0},
        {"op": "Replace", "start": 0, "end": 0},
        {"op": "replace", "start": -1, "end": 0},
        {"op": "replace", "start": 0, "end": 0.5},
        {"op": "replace", "start": "0", "end": 0},
        {"op": "replace", "start": 0, "end": None},
        {"op": "replace", "start": 0, "end": 2**53},
        {"start": 0, "end": 0, "kind": "replace"},
    ],
)
def test_a_malformed_replace_is_refused(mode: str, surface_op: Any) -> None:
    rejected_at(mode, [user_message(), user_message(surface_op=surface_op, sourceEventSeqs=[0])], 1, "replace")


NON_SURFACE = [
    pytest.param([turn_start(1)], id="turn/start"),
    pytest.param([*IN_STEP, tool_call(1, 1, "c1")], id="tool/call"),
    pytest.param([*IN_STEP, assistant_chunk(1, 1)], id="assistant/chunk"),
    pytest.param([title()], id="log-only"),
    pytest.param([event("session/end-seed", {})], id="session/end-seed"),
    pytest.param([*IN_TURN, request_header()], id="request/header"),
]


@pytest.mark.parametrize("events", NON_SURFACE)
@pytest.mark.parametrize(
    ("key", "value"), [("surfaceOp", "append"), ("surfaceOp", replace(0, 0)), ("sourceEventSeqs", [0])]
)
def test_no_other_type_may_carry_surface_metadata(mode: str, events: list[Any], key: str, value: Any) -> None:
    # facts 9.2: "rejects surface metadata on non-surface append and seed events"
    prefix = [user_message()]
    bad = {**events[-1], key: value}
    rejected_at(mode, [*prefix, *events[:-1], bad], len(events), f"cannot carry {key}")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("0", "array"),
        (0, "array"),
        ({"0": 0}, "array"),
        ([], "must not be empty"),
        ([0, 0], "duplicates"),
        ([0, 0.0], "duplicates"),
        ([2], "2 >= current seq 2"),
        ([0, 5], "5 >= current seq 2"),
        ([-1], "non-negative integer"),
        ([0.5], "non-negative integer"),
        (["0"], "non-negative integer"),
        ([None], "non-negative integer"),
        ([2**53], "non-negative integer"),
    ],
)
def test_source_event_seqs_rules(mode: str, value: Any, fragment: str) -> None:
    rejected_at(mode, [title(), title(), user_message(sourceEventSeqs=value)], 2, fragment)


def test_source_event_seqs_may_be_empty_only_on_assistant_message(mode: str) -> None:
    submit(mode, [*IN_STEP, assistant_message(1, 1, sourceEventSeqs=[])])
    rejected_at(mode, [*CALLED, tool_result(1, 1, "c1", sourceEventSeqs=[])], 3, "must not be empty")
    rejected_at(mode, [user_message(sourceEventSeqs=[])], 0, "must not be empty")


def test_source_event_seqs_may_cite_any_earlier_events_in_any_order(mode: str) -> None:
    events = [
        *IN_STEP,
        assistant_chunk(1, 1),
        assistant_chunk(1, 1),
        assistant_message(1, 1, sourceEventSeqs=[3, 0, 2]),
    ]
    session = submit(mode, events)
    assert stored(session)[-1]["sourceEventSeqs"] == [3, 0, 2]


# -- model history and replace -------------------------------------------------------------------------------------


def test_history_is_the_fold_of_surface_events_only(mode: str) -> None:
    events = [
        user_message("idle"),
        title(),
        turn_start(1),
        step_start(1, 1),
        user_message("question"),
        assistant_chunk(1, 1),
        assistant_message(1, 1, "calling", calls=["c1"]),
        tool_call(1, 1, "c1"),
        tool_result(1, 1, "c1", "result"),
        step_end(1, 1),
        turn_end(1),
        event("session/end-seed", {}),
    ]
    session = submit(mode, copy.deepcopy(events))
    assert history(session) == [
        events[0]["data"],
        events[4]["data"],
        events[6]["data"]["message"],
        events[8]["data"]["message"],
    ]


def test_an_assistant_message_with_empty_content_adds_a_node_but_no_message(mode: str) -> None:
    events = [*IN_STEP, user_message("q"), assistant_message(1, 1, None, data_extra={"usage": {"inputTokens": 3}})]
    session = submit(mode, events)
    assert history(session) == [events[2]["data"]]
    # a later replace may name that empty node
    events += [user_message("summary", surface_op=replace(3, 3), sourceEventSeqs=[3])]
    session = submit(mode, events)
    assert history(session) == [events[2]["data"], events[4]["data"]]


def three_messages() -> list[dict[str, Any]]:
    return [user_message("m0"), user_message("m1"), user_message("m2")]


def test_replace_puts_its_message_in_place_of_the_removed_nodes(mode: str) -> None:
    events = [*three_messages(), user_message("summary", surface_op=replace(0, 1), sourceEventSeqs=[0, 1])]
    session = submit(mode, events)
    assert history(session) == [events[3]["data"], events[2]["data"]]


def test_replace_of_a_single_node_and_extra_sources(mode: str) -> None:
    events = [*three_messages(), title(), user_message("new m1", surface_op=replace(1, 1), sourceEventSeqs=[3, 1, 0])]
    session = submit(mode, events)
    assert history(session) == [events[0]["data"], events[4]["data"], events[2]["data"]]


@pytest.mark.parametrize(
    ("surface_op", "sources", "fragment"),
    [
        (replace(0, 1), [0], "missing 1"),
        (replace(0, 2), [0, 2], "missing 1"),
        (replace(0, 1), None, "missing 0, 1"),
        (replace(3, 3), [3], "start seq 3 is not a current surface node"),
        (replace(0, 3), [0, 1, 2, 3], "end seq 3 is not a current surface node"),
        (replace(0, 99), [0], "end seq 99"),
        (replace(2, 0), [0, 1, 2], "start seq 2 comes after end seq 0"),
    ],
)
def test_replace_rules(mode: str, surface_op: Any, sources: Any, fragment: str) -> None:
    extra = {} if sources is None else {"sourceEventSeqs": sources}
    events = [*three_messages(), title(), user_message("x", surface_op=surface_op, **extra)]
    rejected_at(mode, events, 4, fragment)


def test_a_removed_node_is_no_longer_current(mode: str) -> None:
    events = [*three_messages(), user_message("s", surface_op=replace(0, 1), sourceEventSeqs=[0, 1])]
    rejected_at(mode, [*events, user_message("t", surface_op=replace(1, 2), sourceEventSeqs=[1, 2])], 4, "start seq 1")
    rejected_at(mode, [*events, user_message("t", surface_op=replace(3, 1), sourceEventSeqs=[1, 3])], 4, "end seq 1")


def test_start_not_after_end_is_judged_in_current_surface_order(mode: str) -> None:
    # [0, 1, 2] -> replace 0..1 by 3 -> [3, 2]: now 3 stands before 2 although its seq is higher
    events = [*three_messages(), user_message("s", surface_op=replace(0, 1), sourceEventSeqs=[0, 1])]
    rejected_at(
        mode,
        [*events, user_message("t", surface_op=replace(2, 3), sourceEventSeqs=[2, 3])],
        4,
        "start seq 2 comes after end seq 3",
    )
    final = [*events, user_message("t", surface_op=replace(3, 2), sourceEventSeqs=[2, 3])]
    session = submit(mode, final)
    assert history(session) == [final[4]["data"]]


def test_an_assistant_replace_still_names_the_open_step(mode: str) -> None:
    events = [*IN_STEP, user_message("q"), assistant_message(1, 1, "draft")]
    good = assistant_message(1, 1, "final", surface_op=replace(3, 3), sourceEventSeqs=[3])
    session = submit(mode, [*events, good])
    assert history(session)[-1] == good["data"]["message"]
    late = assistant_message(1, 1, "final", surface_op=replace(3, 3), sourceEventSeqs=[3])
    rejected_at(mode, [*events, step_end(1, 1), late], 5, "open is turn 1/step null")


def test_a_user_message_replace_is_allowed_anywhere(mode: str) -> None:
    events = [*simple_turn(1), user_message("compacted", surface_op=replace(2, 5), sourceEventSeqs=[2, 5])]
    session = submit(mode, events)
    assert history(session) == [events[-1]["data"]]


# -- tool/result replace -------------------------------------------------------------------------------------------


def answered_call() -> list[dict[str, Any]]:
    """Turn 1, step 1: the model calls c1 and gets its result (seq 5); the step is still open."""
    return [
        turn_start(1),
        step_start(1, 1),
        user_message("q"),
        assistant_message(1, 1, None, calls=["c1"]),
        tool_call(1, 1, "c1"),
        tool_result(1, 1, "c1", "a very long output"),
    ]


def rewrite_of(original: dict[str, Any], **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(original["data"])
    data["message"]["content"][0]["content"] = [{"type": "text", "text": "[output elided]"}]
    for path, value in changes.items():
        target = data
        keys = path.split("__")
        for key in keys[:-1]:
            target = target[int(key)] if isinstance(target, list) else target[key]
        target[keys[-1]] = value
    return event("tool/result", data, surfaceOp=replace(5, 5), sourceEventSeqs=[5])


def test_a_tool_result_replace_may_change_the_inner_content(mode: str) -> None:
    events = answered_call()
    rewrite = rewrite_of(events[5])
    session = submit(mode, [*events, rewrite])
    assert history(session)[-1] == rewrite["data"]["message"]
    assert history(session)[-1]["content"][0]["content"] == [{"type": "text", "text": "[output elided]"}]


def test_a_tool_result_replace_compares_numbers_as_json_values(mode: str) -> None:
    events = answered_call()
    submit(mode, [*events, rewrite_of(events[5], turn=1.0, step=1.0)])


@pytest.mark.parametrize(
    "changes",
    [
        {"message__id": "other"},
        {"message__content__0__isError": True},
        {"message__content__0__extra": 1},
        {"message__role": "user", "message__meta": 1},
        {"error": {"name": "E", "code": "X"}},
        {"turn": "1"},
        {"step": 2},
        {"meta": None},
    ],
)
def test_a_tool_result_replace_may_change_nothing_else(mode: str, changes: dict[str, Any]) -> None:
    events = answered_call()
    rejected_at(mode, [*events, rewrite_of(events[5], **changes)], 6, "only message.content[0].content")


def test_a_tool_result_replace_removes_exactly_one_tool_result(mode: str) -> None:
    events = answered_call()
    two = {**rewrite_of(events[5]), "surfaceOp": replace(3, 5), "sourceEventSeqs": [3, 5]}
    rejected_at(mode, [*events, two], 6, "exactly one")
    of_user = {**rewrite_of(events[5]), "surfaceOp": replace(2, 2), "sourceEventSeqs": [2]}
    rejected_at(mode, [*events, of_user], 6, "current tool/result")


def test_a_tool_result_replace_needs_an_open_turn_but_no_open_step(mode: str) -> None:
    events = [*answered_call(), step_end(1, 1)]
    rewrite = rewrite_of(events[5])
    submit(mode, [*events, rewrite])  # in turn 1, no step open
    submit(mode, [*events, turn_end(1), turn_start(2), rewrite])  # a later turn
    rejected_at(mode, [*events, turn_end(1), rewrite], 8, "outside any open turn")


# -- seeds ---------------------------------------------------------------------------------------------------------


def test_a_seed_may_end_inside_an_open_turn_which_stays_open() -> None:
    # facts 3.1: after [turn/start(1)] is seeded the turn stays open: turn/start(2) fails, turn/end(1) succeeds
    store = make_store()
    create(store, "s", [turn_start(1)])
    head = store.get("s").view().head
    assert (head.count, head.open_turn, head.last_type) == (1, 1, "turn/start")
    with pytest.raises(SessionError) as caught:
        store.append("s", [turn_start(2)])
    assert caught.value.facts["index"] == 0
    append(store, "s", [turn_end(1)])
    assert store.get("s").view().head.open_turn is None


def test_a_seed_may_end_inside_an_open_step_with_pending_calls() -> None:
    store = make_store()
    create(store, "s", [*IN_STEP, tool_call(1, 1, "c1")])
    assert store.get("s").view().head.count == 3  # nothing added: no closers, no end-seed marker
    with pytest.raises(SessionError):
        store.append("s", [tool_result(1, 1, "c2")])
    append(store, "s", [tool_result(1, 1, "c1"), step_end(1, 1), turn_end(1)])


def test_a_seed_with_two_turn_starts_is_refused_at_create() -> None:
    # facts 9.3: "a bad seed (two turn/start events) throws InvariantError at create"
    rejected_at("seed", numbered([turn_start(1), turn_start(2)]), 1, "still open")


def test_an_explicitly_empty_seed_creates_an_empty_log() -> None:
    # facts 9.2 translated: forklog adds no session/end-seed marker
    store = make_store()
    assert len(create(store, "a", []).log) == 0
    assert len(create(store, "b").log) == 0


def test_a_log_reseeded_from_its_own_events_replays_identically() -> None:
    # facts 9.2: "replays identically from a seeded event log"
    store = make_store()
    create(store, "a", [*turns(3), title(), user_message("tail")])
    seed = store.get("a").log.events()
    copy_of = create(store, "b", seed)
    assert copy_of.log.events() == seed
    assert copy_of.log.history() == store.get("a").log.history()
    assert append(store, "b", [title()])[0]["seq"] == len(seed)


def test_a_well_formed_numbered_seed_is_accepted_as_is() -> None:
    seed = numbered([*turns(2), *tool_turn(3, ("x", "y", "z"))])
    session = submit("seed", copy.deepcopy(seed))
    assert stored(session) == seed


def test_a_seed_ending_in_end_seed_gets_no_further_marker() -> None:
    session = submit("seed", [*simple_turn(1), event("session/end-seed", {})])
    assert len(session.log) == 9


# -- the lowest bad index ------------------------------------------------------------------------------------------


def test_the_lowest_bad_index_is_named_whatever_the_kind_of_break(mode: str) -> None:
    shape_break = with_message("user/message", user_without["id"])
    events = [title(), turn_start(1), step_start(1, 2), shape_break, turn_start(1)]
    rejected_at(mode, events, 2, "expected step 1")
    # a relational break before an envelope break
    rejected_at(mode, [title(), turn_end(1), {"type": "x"}], 1, "does not match")
    # an envelope break before a shape break
    rejected_at(mode, [{**title(), "extra": 1}, shape_break], 0, "extra")


def test_a_lossless_break_is_named_by_its_index(mode: str) -> None:
    events = [title(), title(), title(), title()]
    rejected_at(mode, events, 2, "-0", breaks={2: "-0 cannot be stored losslessly"})
    rejected_at(mode, events, 1, "losslessly", breaks={3: "x", 1: "duplicate key 'a' in one object"})


def test_the_lowest_of_a_lossless_break_and_a_rule_break_wins(mode: str) -> None:
    events = [title(), turn_end(1), title(), title()]
    rejected_at(mode, events, 1, "does not match open turn", breaks={3: "-0 cannot be stored losslessly"})
    rejected_at(mode, [title(), *events], 1, "lossless", breaks={1: "number 1e400 is out of range"})


def test_seed_lowest_index_even_where_dsh_would_report_a_later_one() -> None:
    # DSH checks shapes for all events before seq contiguity; forklog names the lowest index
    seed = [{**title(), "seq": 3, "time": T0}, {**user_message(), "seq": 1, "time": T0, "data": {"id": ""}}]
    rejected_at("seed", seed, 0, "seq")


def test_an_append_refusal_stores_nothing_of_the_batch() -> None:
    store = make_store()
    create(store, "s", simple_turn(1))
    before = store.get("s").log.events()
    with pytest.raises(SessionError) as caught:
        store.append("s", [turn_start(2), step_start(2, 1), user_message(), step_start(2, 2)])
    assert caught.value.facts["index"] == 3
    assert store.get("s").log.events() == before
    assert store.get("s").view().head.open_turn is None
    # the next valid append continues right after the stored events
    assert append(store, "s", [turn_start(2)])[0]["seq"] == len(before)


def test_an_append_batch_is_validated_as_one_sequence() -> None:
    store = make_store()
    create(store, "s")
    append(store, "s", [turn_start(1), step_start(1, 1)])
    stored_events = append(store, "s", [tool_call(1, 1, "c1"), tool_result(1, 1, "c1"), step_end(1, 1)])
    assert [item["seq"] for item in stored_events] == [2, 3, 4]
    with pytest.raises(SessionError) as caught:
        store.append("s", [turn_end(1), turn_end(1)])
    assert caught.value.facts["index"] == 1


def test_non_message_events_never_change_the_history(mode: str) -> None:
    # facts 9.2 property: non-message events never change derived history
    base = [user_message("a"), *simple_turn(1)]
    noisy = [title(), base[0], event("plugin/x", None), *base[1:4], event("todo/write", None), *base[4:], title()]
    a = submit(mode, copy.deepcopy(base))
    b = submit(mode, copy.deepcopy(noisy))
    assert history(a) == history(b)
    assert len(history(a)) == 3


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_an_event_nested_as_deep_as_lossless_json_allows_is_stored_and_read_back() -> None:
    # A request body may nest 1,000 levels; {"events": [{"data": ...}]} takes 3 of them, leaving 997 for data.
    body = b'{"events": [{"type": "note/x", "data": ' + b"[" * 997 + b"0" + b"]" * 997 + b"}]}"
    value, breaks = loads(body)
    assert breaks == []
    store = make_store()
    create(store, "s")
    stored_events = append(store, "s", value["events"])
    assert stored_events[0]["data"] == nested(997)
    assert store.get("s").log.events() == stored_events
    assert store.get("s").log.event(0)["data"] == nested(997)
    # a deep message reaches the history, a seed and a fork alike
    deep_message = {
        **user_message(),
        "data": {**user_data(), "content": [{"type": "text", "text": "x", "deep": nested(990)}]},
    }
    append(store, "s", [deep_message, turn_start(1), turn_end(1)])
    assert store.history("s")[0][0]["content"][0]["deep"] == nested(990)
    child = fork(store, "s")
    assert child.log.lines() == store.get("s").log.lines()
    assert create(store, "copy", store.get("s").log.events()).log.lines() == child.log.lines()
