"""Spec 1.4 "Parity with DSH": on seeds whose events carry seq and time, forklog accepts exactly what DSH's store
accepts (save forklog's three listed extra refusals) and derives the same history.

The seeds are the real DSH logs under ../shared/fixtures/dsh-logs mutated at random (a deterministic generator),
plus hand-written cases for JavaScript's comparison quirks that the invariant inherits.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import pytest

from app.domain.dsh_records import decode_line
from app.domain.errors import SessionError
from app.domain.log import seed_log
from tests.oracle.conftest import FIXTURES, Oracle

# forklog's own refusals on top of DSH's (spec 1.4): the reason names one of these rules.
FORKLOG_ONLY_RULES = ("assistant/chunk needs", "turn/end needs", "tool/call needs", "storage tag", "'type'")

MESSAGE = {"id": "m", "role": "user", "content": [], "source": {"kind": "user"}}
REASON = {"kind": "completed"}
VALUES: list[Any] = [None, 0, 1, 2, 1.0, -1, "1", "x", "", True, False, [], {}, REASON, "append"]


def forklog_verdict(events: list[Any]) -> tuple[bool, list[Any] | None, str]:
    try:
        log = seed_log(copy.deepcopy(events), now=0)
    except SessionError as error:
        return False, None, error.detail
    return True, log.history(), ""


def assert_parity(oracle: Oracle, events: list[Any]) -> None:
    dsh = oracle.seed(events)
    accepted, history, reason = forklog_verdict(events)
    if dsh["ok"] and not accepted:
        assert any(rule in reason for rule in FORKLOG_ONLY_RULES), f"DSH accepts, forklog refuses: {reason}"
        return
    dsh_reason = (dsh.get("error") or {}).get("message")
    assert accepted == dsh["ok"], f"DSH refuses ({dsh_reason}), forklog accepts"
    if accepted:
        assert history == dsh["messages"]


def load_logs() -> list[list[Any]]:
    logs = []
    for path in sorted(Path(FIXTURES).glob("*.jsonl")):
        events: list[Any] = []
        for line in path.read_bytes().split(b"\n")[1:]:
            if line:
                events.extend(decode_line(line))
        logs.append(events)
    return logs


def mutate(events: list[Any], rng: random.Random) -> list[Any]:
    events = copy.deepcopy(events)
    if not events:
        return events
    at = rng.randrange(len(events))
    event = events[at]
    data = event.get("data")
    choice = rng.randrange(7)
    if choice == 0:
        del events[at]
    elif choice == 1:
        events.insert(at, copy.deepcopy(event))
    elif choice == 2 and isinstance(data, dict) and data:
        data[rng.choice(list(data))] = rng.choice(VALUES)
    elif choice == 3 and isinstance(data, dict) and data:
        del data[rng.choice(list(data))]
    elif choice == 4:
        event[rng.choice(["surfaceOp", "sourceEventSeqs", "ignorable"])] = rng.choice([*VALUES, [0], [at], [0, 0]])
    elif choice == 5:
        other = rng.randrange(len(events))
        events[at], events[other] = events[other], events[at]
    else:
        message = data.get("message") if isinstance(data, dict) and isinstance(data.get("message"), dict) else data
        if isinstance(message, dict) and message:
            message[rng.choice(list(message))] = rng.choice(VALUES)
    for seq, item in enumerate(events):
        if isinstance(item, dict):
            item["seq"] = seq
    return events


@pytest.mark.parametrize("round_", range(4))
def test_mutated_dsh_logs_get_dsh_verdicts(dsh_oracle: Oracle, round_: int) -> None:
    rng = random.Random(round_)
    logs = load_logs()
    for _ in range(150):
        events = rng.choice(logs)
        for _ in range(rng.randint(1, 2)):
            events = mutate(events, rng)
        assert_parity(dsh_oracle, events)


def _event(kind: str, data: Any, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "data": data, **extra}


QUIRKS: dict[str, list[dict[str, Any]]] = {
    # DSH compares with ===: null names the "open turn" null, so these pass its invariant.
    "turn/end with turn null outside a turn": [_event("turn/end", {"turn": None, "reason": REASON})],
    "step/start with turn null": [
        _event("step/start", {"turn": None, "step": 1}),
        _event("step/end", {"turn": None, "step": 1}),
    ],
    "turn 1.0 equals 1": [_event("turn/start", {"turn": 1.0}), _event("turn/end", {"turn": 1, "reason": REASON})],
    "turn true is not 1": [_event("turn/start", {"turn": True})],
    "data null": [_event("turn/start", None)],
    "user/message replace outside a turn": [
        _event("user/message", MESSAGE, surfaceOp="append"),
        _event("user/message", MESSAGE, surfaceOp={"op": "replace", "start": 0, "end": 0}, sourceEventSeqs=[0]),
    ],
    "sourceEventSeqs 0 and 0.0 are duplicates": [
        _event("user/message", MESSAGE, surfaceOp="append"),
        _event("user/message", MESSAGE, surfaceOp="append", sourceEventSeqs=[0, 0.0]),
    ],
    "surfaceOp null on a non-surface event": [_event("turn/start", {"turn": 1}, surfaceOp=None)],
    "adapterDefaults with a null (set) config field": [
        _event("turn/start", {"turn": 1}),
        _event(
            "request/header",
            {
                "header": {
                    "config": {"provider": "p", "model": "m", "maxTokens": None},
                    "adapterDefaults": {"maxTokens": True},
                }
            },
        ),
    ],
    "seq and time as 0.0": [{"type": "x", "seq": 0.0, "time": 1.0, "data": 1}],
    "negative time": [{"type": "x", "seq": 0, "time": -5, "data": 1}],
}


@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_javascript_comparison_quirks_match_dsh(dsh_oracle: Oracle, name: str) -> None:
    events = [
        {**event, "seq": event.get("seq", seq), "time": event.get("time", 1000 + seq)}
        for seq, event in enumerate(QUIRKS[name])
    ]
    assert_parity(dsh_oracle, events)
