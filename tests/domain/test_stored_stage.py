"""A start checks stored lines as they lie (``stage_stored``): whatever it admits, :func:`stage` admits the same way,
byte for byte and state for state; whatever :func:`stage` refuses, it declines (and the long way says why)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.errors import EventRejected
from app.domain.log import SessionLog
from app.domain.staging import StagedEvents
from app.domain.staging_rules import stage, stage_stored
from tests.domain.builders import numbered, simple_turn, tool_turn, turns
from tests.domain.test_properties import FAST, corrupt, corruptions, valid_logs

NOW = 1_785_400_000_000
# What a stored line may hold that an appended event may not, and the shapes the quick admission looks at.
STORED_CORRUPTIONS = (
    "seq-float",
    "seq-wrong",
    "drop-seq",
    "time-float",
    "time-huge",
    "drop-time",
    "turn-bool",
    "turn-float",
    "step-float",
    "chunk-not-object",
    "extra-ignorable",
    "step-plus-one",
    "turn-plus-one",
    "reason-kind-not-string",
    "extra-key",
    "extra-surface-op",
)
QUICK_SHAPES = frozenset({"assistant/chunk", "step/start", "step/end", "turn/start", "turn/end"})
MANY = settings(FAST, max_examples=150)


def corrupt_stored(pick: Callable[[Sequence[Any]], Any], item: dict[str, Any], how: str) -> dict[str, Any]:
    """``item`` damaged as ``how`` says (``pick`` chooses among the ways to), or as it was where that does not apply."""
    bad = copy.deepcopy(item)
    data = bad["data"] if isinstance(bad.get("data"), dict) else {}
    if how == "seq-float":
        bad["seq"] = float(bad["seq"])
    elif how == "seq-wrong":
        bad["seq"] += pick([1, -1])
    elif how == "drop-seq":
        del bad["seq"]
    elif how == "time-float":
        bad["time"] = float(bad["time"])
    elif how == "time-huge":
        bad["time"] = 2**53
    elif how == "drop-time":
        del bad["time"]
    elif how == "turn-bool" and "turn" in data:
        data["turn"] = True
    elif how == "turn-float" and "turn" in data:
        data["turn"] = float(data["turn"])
    elif how == "step-float" and "step" in data:
        data["step"] = float(data["step"])
    elif how == "chunk-not-object" and "chunk" in data:
        data["chunk"] = pick([None, "text", []])
    elif how == "extra-ignorable":
        bad["ignorable"] = True
    elif how == "step-plus-one" and "step" in data:
        data["step"] += 1
    elif how == "turn-plus-one" and "turn" in data:
        data["turn"] += 1
    elif how == "extra-key":
        bad["meta"] = 1
    elif how == "extra-surface-op":
        bad["surfaceOp"] = "append"
    elif how == "reason-kind-not-string" and "reason" in data:
        data["reason"] = pick([{}, {"kind": 1}, {"kind": None}, []])
    return bad


def drawn_by(data: st.DataObject) -> Callable[[Sequence[Any]], Any]:
    def pick(options: Sequence[Any]) -> Any:
        return data.draw(st.sampled_from(options))

    return pick


def nth(at: int) -> Callable[[Sequence[Any]], Any]:
    return lambda options: options[at]


def checked_both_ways(tip_events: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
    tip = SessionLog()
    if tip_events:
        tip.commit(tip.stage(tip_events, appended=False, now=NOW))
    lines = [orjson.dumps(event) for event in events]
    window = b"".join(line + b"\n" for line in lines)
    fast = stage_stored(tip, window, lines, [orjson.loads(line) for line in lines], now=NOW)
    slow: StagedEvents | None
    try:
        slow = stage(tip, [orjson.loads(line) for line in lines], appended=False, now=NOW)
    except EventRejected:
        slow = None
    if fast is None:
        # Declined only what the long way refuses, or stores in another form than it came.
        assert slow is None or slow.lines != window
        return
    assert slow is not None, "admitted what the rules refuse"
    assert fast.lines == slow.lines == window
    assert (fast.base_count, fast.ends, fast.events) == (slow.base_count, slow.ends, slow.events)
    assert (fast.surface_ops, fast.turn_ends, fast.checkpoints) == (slow.surface_ops, slow.turn_ends, slow.checkpoints)
    assert fast.state == slow.state


@MANY
@given(data=st.data())
def test_stored_lines_are_admitted_exactly_as_the_rules_admit_them(data: st.DataObject) -> None:
    events = numbered(data.draw(valid_logs(max_turns=3)).events)
    damaged: bool = data.draw(st.booleans(), label="damaged")
    if events and damaged:
        quick = [index for index, item in enumerate(events) if item["type"] in QUICK_SHAPES]
        among_quick: bool = data.draw(st.booleans(), label="one of the quick shapes")
        if quick and among_quick:
            index = data.draw(st.sampled_from(quick), label="index")
        else:
            index = data.draw(st.integers(0, len(events) - 1), label="index")
        stored = data.draw(st.booleans(), label="a stored line's own damage")
        how = data.draw(st.sampled_from(STORED_CORRUPTIONS if stored else corruptions(events[index])), label="how")
        events[index] = (
            corrupt_stored(drawn_by(data), events[index], how) if stored else corrupt(data, events[index], how)
        )
    split = data.draw(st.integers(0, len(events)), label="committed before the window")
    try:
        head = stage(SessionLog(), copy.deepcopy(events[:split]), appended=False, now=NOW)
    except EventRejected:
        return  # the damage is in what the tip would hold: not a tip a start builds on
    assert head is not None
    checked_both_ways(events[:split], events[split:])


CHOICES = {"seq-wrong": 2, "chunk-not-object": 3, "reason-kind-not-string": 4}


def test_every_stored_damage_of_every_event_is_refused_or_declined() -> None:
    plain = turns(2) + tool_turn(3) + simple_turn(4)
    events = numbered(plain)
    for index in range(len(events)):
        for changed in ([*plain[: index + 1], *plain[index:]], [*plain[:index], *plain[index + 1 :]]):
            checked_both_ways([], numbered(changed))  # an event twice, an event left out
            checked_both_ways([], numbered(changed[: index + 2]))
        for how in STORED_CORRUPTIONS:
            for choice in range(CHOICES.get(how, 1)):
                damaged = copy.deepcopy(events)
                damaged[index] = corrupt_stored(nth(choice), damaged[index], how)
                checked_both_ways([], damaged)
                checked_both_ways([], damaged[: index + 1])  # nothing after the damage to give it away


def test_a_window_of_common_shapes_is_admitted_as_it_lies() -> None:
    """The quick way is taken for a log of the shapes a start meets most (else it would never be faster)."""
    events = numbered(turns(3))
    lines = [orjson.dumps(event) for event in events]
    window = b"".join(line + b"\n" for line in lines)
    staged = stage_stored(SessionLog(), window, lines, [orjson.loads(line) for line in lines], now=NOW)
    assert staged is not None and staged.lines is window
    assert staged.state.count == len(events) and len(staged.turn_ends) == 3
