"""Properties over random logs: valid logs always pass, a single corruption is named by its index, forks are exact."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.api.wire.resources import session_json
from app.domain.errors import ErrorCode, SessionError
from tests.domain.builders import (
    append,
    assistant_chunk,
    assistant_message,
    create,
    event,
    events_of,
    fork,
    history_of,
    make_store,
    not_started_result,
    replace,
    request_header,
    step_end,
    step_start,
    title,
    tool_call,
    tool_result,
    turn_end,
    turn_start,
    user_message,
)
from tests.service.harness import StoreHarness

FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

REASONS = st.one_of(
    st.sampled_from(["completed", "aborted", "blocked", "error", "max-tokens", "interrupted"]),
    st.text(min_size=0, max_size=12),
)
LOG_ONLY = st.sampled_from(["session/title", "plugin/note", "compaction/start", "session/end-seed", "goal/change"])
SMALL_TEXT = st.text(max_size=8)


@dataclass
class LogBuilder:
    """A valid log under construction, with what the rules need to know to extend it validly."""

    events: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)  # current surface, seqs in model order
    calls: int = 0

    def add(self, item: dict[str, Any]) -> int:
        seq = len(self.events)
        self.events.append(item)
        op = item.get("surfaceOp")
        if op == "append":
            self.nodes.append(seq)
        elif isinstance(op, dict):
            start, end = self.nodes.index(op["start"]), self.nodes.index(op["end"])
            self.nodes[start : end + 1] = [seq]
        return seq

    def call_id(self) -> str:
        self.calls += 1
        return f"call-{self.calls}"

    def turn_end_seqs(self) -> list[int]:
        return [seq for seq, item in enumerate(self.events) if item["type"] == "turn/end"]


def add_log_only(draw: st.DrawFn, log: LogBuilder) -> None:
    for _ in range(draw(st.integers(0, 2))):
        log.add(event(draw(LOG_ONLY), draw(st.one_of(st.none(), st.dictionaries(SMALL_TEXT, SMALL_TEXT, max_size=2)))))


def add_user_replace(draw: st.DrawFn, log: LogBuilder) -> None:
    """A user/message that replaces a random run of current surface nodes (a compaction)."""
    if not log.nodes:
        return
    start = draw(st.integers(0, len(log.nodes) - 1))
    end = draw(st.integers(start, len(log.nodes) - 1))
    removed = log.nodes[start : end + 1]
    extra = draw(st.lists(st.integers(0, len(log.events) - 1), max_size=2))
    sources = draw(st.permutations(sorted(set(removed) | set(extra))))
    log.add(user_message("summary", surface_op=replace(log.nodes[start], log.nodes[end]), sourceEventSeqs=sources))


def add_tool_result_rewrite(draw: st.DrawFn, log: LogBuilder) -> None:
    """A tool/result replace of one current tool/result node, changing only its inner content."""
    results = [seq for seq in log.nodes if log.events[seq]["type"] == "tool/result"]
    if not results:
        return
    target = draw(st.sampled_from(results))
    data = copy.deepcopy(log.events[target]["data"])
    data["message"]["content"][0]["content"] = [{"type": "text", "text": draw(SMALL_TEXT)}]
    log.add(event("tool/result", data, surfaceOp=replace(target, target), sourceEventSeqs=[target]))


def add_step(draw: st.DrawFn, log: LogBuilder, turn: int, step: int, *, close: bool = True) -> None:
    log.add(step_start(turn, step))
    if draw(st.booleans()):
        log.add(user_message(draw(SMALL_TEXT)))
    for _ in range(draw(st.integers(0, 3))):
        log.add(assistant_chunk(turn, step, draw(SMALL_TEXT)))
    calls = [log.call_id() for _ in range(draw(st.integers(0, 3)))]
    text = draw(st.one_of(st.none(), SMALL_TEXT))
    log.add(assistant_message(turn, step, text, calls=calls))
    for call in calls:
        log.add(tool_call(turn, step, call))
    answered = draw(st.permutations(calls))[: draw(st.integers(0, len(calls)))]
    for call in answered:  # results in any order; some calls stay unanswered
        log.add(tool_result(turn, step, call, draw(SMALL_TEXT)))
    if draw(st.integers(0, 4)) == 0:
        log.add(not_started_result(turn, step, log.call_id()))
    if draw(st.integers(0, 4)) == 0:
        add_tool_result_rewrite(draw, log)
    add_log_only(draw, log)
    if close:
        log.add(step_end(turn, step))


@st.composite
def valid_logs(draw: st.DrawFn, *, max_turns: int = 4, may_end_open: bool = True) -> LogBuilder:
    log = LogBuilder()
    turns = draw(st.integers(0, max_turns))
    for turn in range(1, turns + 1):
        add_log_only(draw, log)
        if draw(st.booleans()):
            log.add(user_message("between turns"))
        if draw(st.integers(0, 3)) == 0:
            add_user_replace(draw, log)
        log.add(turn_start(turn))
        if draw(st.booleans()):
            log.add(request_header())
        for step in range(1, draw(st.integers(0, 3)) + 1):
            add_step(draw, log, turn, step)
        if draw(st.integers(0, 3)) == 0:
            add_tool_result_rewrite(draw, log)
        log.add(turn_end(turn, draw(REASONS)))
    add_log_only(draw, log)
    if may_end_open and draw(st.booleans()):
        turn = turns + 1
        log.add(turn_start(turn))
        steps = draw(st.integers(0, 2))
        for step in range(1, steps + 1):
            add_step(draw, log, turn, step, close=step < steps or draw(st.booleans()))
    return log


def batches(data: st.DataObject, count: int) -> list[int]:
    """Random batch sizes that add up to ``count``."""
    sizes: list[int] = []
    while sum(sizes) < count:
        sizes.append(data.draw(st.integers(1, min(8, count - sum(sizes)))))
    return sizes


# -- valid logs are never rejected ---------------------------------------------------------------------------------


@FAST
@given(data=st.data())
def test_a_valid_log_is_accepted_as_a_seed_and_appended_in_any_batches(data: st.DataObject) -> None:
    log = data.draw(valid_logs())
    store = make_store()
    seeded = create(store, "seeded", copy.deepcopy(log.events))
    create(store, "appended")
    offset = 0
    for size in batches(data, len(log.events)):
        stored = append(store, "appended", copy.deepcopy(log.events[offset : offset + size]), expected_seq=offset)
        assert [item["seq"] for item in stored] == list(range(offset, offset + size))
        offset += size
    assert len(seeded.log) == len(log.events)
    for name in ("seeded", "appended"):
        stored_events = events_of(store, name)
        assert [item["seq"] for item in stored_events] == list(range(len(log.events)))
        assert [{k: v for k, v in item.items() if k not in ("seq", "time")} for item in stored_events] == log.events
    # the history is the projection of the current surface nodes
    expected = [
        log.events[seq]["data"] if log.events[seq]["type"] == "user/message" else log.events[seq]["data"]["message"]
        for seq in log.nodes
    ]
    expected = [message for message in expected if message["content"] or message["role"] != "assistant"]
    assert history_of(store, "seeded") == expected
    assert history_of(store, "appended") == expected
    # the seed replays to the same session
    assert create(store, "replayed", events_of(store, "seeded")).log.lines() == seeded.log.lines()


# -- a single corruption is named by its index ---------------------------------------------------------------------

REQUIRED_DATA_KEYS = {
    "turn/start": ("turn",),
    "turn/end": ("turn", "reason"),
    "step/start": ("turn", "step"),
    "step/end": ("turn", "step"),
    "assistant/chunk": ("turn", "step", "chunk"),
    "assistant/message": ("turn", "step", "message"),
    "tool/call": ("turn", "step", "callId", "name", "arguments"),
    "user/message": ("id", "role", "content", "source"),
    "request/header": ("header",),
}
TURN_NAMING = ("turn/start", "turn/end", "step/start", "step/end", "assistant/chunk", "assistant/message", "tool/call")
SURFACE = ("user/message", "assistant/message", "tool/result")


def corruptions(item: dict[str, Any]) -> list[str]:
    """The corruptions that make ``item`` invalid wherever it stands in a valid log."""
    kind = item["type"]
    found = ["drop-type", "drop-data", "unknown-key", "storage-tag", "empty-type", "ignorable-false"]
    if kind in SURFACE:
        found += ["drop-surface-op", "empty-message-id", "bad-surface-op"]
    else:
        found += ["add-surface-op", "add-source-seqs"]
    if kind in REQUIRED_DATA_KEYS:
        found.append("drop-data-key")
    if kind in TURN_NAMING or (kind == "tool/result" and item.get("surfaceOp") == "append"):
        found += ["turn-plus-one", "turn-as-string"]
    if kind == "turn/end":
        found.append("reason-not-object")
    return found


def corrupt(data_object: st.DataObject, item: dict[str, Any], how: str) -> dict[str, Any]:
    draw = data_object.draw
    bad = copy.deepcopy(item)
    data: Any = bad.get("data")
    if how == "drop-type":
        del bad["type"]
    elif how == "drop-data":
        del bad["data"]
    elif how == "unknown-key":
        bad[draw(st.sampled_from(["extra", "Type", "meta", "id"]))] = 1
    elif how == "storage-tag":
        bad["type"] = draw(st.sampled_from(["session", "text-chunks", "reasoning-chunks", "tool-call-chunks"]))
    elif how == "empty-type":
        bad["type"] = draw(st.sampled_from(["", "x" * 257]))
    elif how == "ignorable-false":
        bad["ignorable"] = draw(st.sampled_from([False, "true", 1, None]))
    elif how == "drop-surface-op":
        del bad["surfaceOp"]
    elif how == "bad-surface-op":
        bad["surfaceOp"] = draw(st.sampled_from(["prepend", {"op": "replace"}, replace(-1, 0), 0]))
    elif how == "empty-message-id":
        (data if item["type"] == "user/message" else data["message"])["id"] = ""
    elif how == "add-surface-op":
        bad["surfaceOp"] = "append"
    elif how == "add-source-seqs":
        bad["sourceEventSeqs"] = [0]
    elif how == "drop-data-key":
        del data[draw(st.sampled_from(REQUIRED_DATA_KEYS[item["type"]]))]
    elif how == "turn-plus-one":
        data["turn"] = data["turn"] + 1
    elif how == "turn-as-string":
        data["turn"] = str(data["turn"])
    elif how == "reason-not-object":
        data["reason"] = draw(st.sampled_from(["completed", None, {}, {"kind": 1}]))
    else:  # pragma: no cover - a typo in the lists above
        raise AssertionError(how)
    return bad


def refusal(store: StoreHarness, mode: str, events: list[dict[str, Any]]) -> SessionError:
    try:
        if mode == "seed":
            store.create("bad", events)
        else:
            store.append("target", events)
    except SessionError as error:
        assert error.code == (ErrorCode.INVALID_SEED if mode == "seed" else ErrorCode.INVALID_EVENT)
        assert error.facts["reason"]
        return error
    raise AssertionError("the corrupted log was accepted")


@FAST
@given(data=st.data(), mode=st.sampled_from(["seed", "append"]))
def test_a_single_corruption_is_rejected_at_its_index(data: st.DataObject, mode: str) -> None:
    log = data.draw(valid_logs())
    if not log.events:
        return
    index = data.draw(st.integers(0, len(log.events) - 1), label="index")
    how = data.draw(st.sampled_from(corruptions(log.events[index])), label="corruption")
    events = copy.deepcopy(log.events)
    events[index] = corrupt(data, events[index], how)
    store = make_store()
    create(store, "target")
    error = refusal(store, mode, events)
    assert error.facts["index"] == index, (how, error)
    assert "bad" not in store
    assert len(store.get("target").log) == 0


@FAST
@given(data=st.data(), mode=st.sampled_from(["seed", "append"]))
def test_a_removed_tool_call_is_named_at_its_first_answer(data: st.DataObject, mode: str) -> None:
    log = data.draw(valid_logs())
    answered = {
        item["data"]["callId"]: seq
        for seq, item in enumerate(log.events)
        if item["type"] == "tool/call"
        and any(
            later["type"] == "tool/result"
            and later.get("surfaceOp") == "append"
            and later["data"]["message"]["source"]["callId"] == item["data"]["callId"]
            for later in log.events[seq:]
        )
    }
    if not answered:
        return
    call_id = data.draw(st.sampled_from(sorted(answered)))
    removed_at = answered[call_id]
    events = copy.deepcopy(log.events)
    del events[removed_at]
    first_answer = next(
        seq
        for seq, item in enumerate(events)
        if item["type"] == "tool/result"
        and item.get("surfaceOp") == "append"
        and item["data"]["message"]["source"]["callId"] == call_id
    )
    store = make_store()
    create(store, "target")
    error = refusal(store, mode, events)
    assert error.facts["index"] == first_answer
    assert f"tool/result for {call_id}" in error.facts["reason"]


@FAST
@given(data=st.data())
def test_a_wrong_seed_seq_is_named_at_its_index(data: st.DataObject) -> None:
    log = data.draw(valid_logs())
    if not log.events:
        return
    events = [{**item, "seq": seq, "time": seq} for seq, item in enumerate(log.events)]
    index = data.draw(st.integers(0, len(events) - 1))
    wrong = st.one_of(st.integers(-3, len(events) + 3), st.just("0"), st.just(0.5))
    events[index]["seq"] = data.draw(wrong.filter(lambda value: value != index))
    error = refusal(make_store(), "seed", events)
    assert error.facts["index"] == index


# -- forks ---------------------------------------------------------------------------------------------------------


@FAST
@given(data=st.data())
def test_a_fork_at_any_turn_end_is_the_source_at_that_seq_and_never_changes_it(data: st.DataObject) -> None:
    log = data.draw(valid_logs(max_turns=4))
    store = make_store()
    source = create(store, "src", copy.deepcopy(log.events))
    ends = log.turn_end_seqs()
    boundaries: list[int | None] = [*ends, None] if source.view().head.forkable else list(ends)
    if not boundaries:
        return
    at_seq = data.draw(st.sampled_from(boundaries))
    before = (source.log.lines(), source.log.history(), source.view())
    child = fork(store, "src", at_seq=at_seq)
    count = len(log.events) if at_seq is None else at_seq + 1
    assert child.log.events() == events_of(store, "src")[:count]
    assert child.log.history() == history_of(store, "src", at_seq)
    # the history of the log up to that seq, derived on its own from a session seeded with just that prefix
    assert child.log.history() == create(make_store(), "p", copy.deepcopy(log.events[:count])).log.history()
    assert child.header.seed_length == count
    assert (source.log.lines(), source.log.history(), source.view()) == before

    # the child goes on with a new turn; the source does not move
    next_turn = sum(1 for item in child.log.events() if item["type"] == "turn/start") + 1
    tail = [turn_start(next_turn), step_start(next_turn, 1), user_message("more"), step_end(next_turn, 1)]
    tail += [turn_end(next_turn, data.draw(REASONS)), title()]
    stored = append(store, child.id, tail)
    assert stored[0]["seq"] == count
    assert (source.log.lines(), source.log.history(), source.view()) == before

    # and the source going on does not move the child
    child_state = (child.log.lines(), child.log.history(), child.view())
    if source.view().head.open_turn is None:
        source_next = sum(1 for item in log.events if item["type"] == "turn/start") + 1
        append(store, "src", [turn_start(source_next), user_message("src"), turn_end(source_next)])
    else:
        append(store, "src", [title(), user_message("src")])
    assert (child.log.lines(), child.log.history(), child.view()) == child_state


@FAST
@given(data=st.data())
def test_a_snapshot_created_equals_a_fork(data: st.DataObject) -> None:
    log = data.draw(valid_logs(max_turns=3, may_end_open=False))
    store = make_store()
    create(store, "src", copy.deepcopy(log.events), {"cwd": "/w", "delegationDepth": 4})
    at_seq = data.draw(st.sampled_from([None, *log.turn_end_seqs()]))
    if at_seq is None and not store.get("src").view().head.forkable:
        return
    snap = store.snapshot("src", at_seq=at_seq)
    by_create = create(store, None, snap.seed.events(), snap.meta)
    by_fork = fork(store, "src", at_seq=at_seq)
    assert by_create.log.lines() == by_fork.log.lines()
    assert by_create.log.history() == by_fork.log.history()
    a, b = session_json(by_create.view()), session_json(by_fork.view())
    for key in ("id", "instance", "createdAt", "updatedAt"):
        del a[key], b[key]
    assert a == b
