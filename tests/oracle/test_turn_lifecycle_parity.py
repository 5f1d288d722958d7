"""Spec 17's parity with DSH's own code: ``POST /sessions/{id}/interrupt`` appends exactly DSH's
``interruptedTurnClosers`` (``type``, ``data``, ``surfaceOp``, ``sourceEventSeqs``) at every seq inside an open turn of
every shared DSH log, and a Session's ``stats`` equal DSH's ``sessionStats`` fold on every shared log and after every
append of a long generated session.

A cut is served as a client would make it: a fork of the log at its last ``turn/end`` before the cut (which shares the
log instead of copying it), the rest of the cut appended, then the interrupt. DSH's closers of a log depend only on
its open turn (its trace restarts at every ``turn/start``, and the closers' seqs continue the last event), so the
oracle is given the cut from the open turn's ``turn/start`` on: the same answer as for the whole cut, without sending
every prefix of every log.

Inside a run of streamed chunks only the run's last seq is cut through the service and sent to the oracle: DSH's
trace skips ``assistant/chunk``, so the closers at a seq inside the run are the run's last ones but for their seqs
(and the message ids, which name the first closer's seq). Every seq inside a run is still checked, on the rules'
state the log keeps (:func:`~app.domain.interrupt.closers_for`, what the service appends), against the run's
oracle answer so renumbered.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.domain.errors import SessionError
from app.domain.interrupt import closers_for
from app.domain.log import SessionLog, seed_log
from tests.api.helpers import wait_ready
from tests.events import agent_step, agent_turn, step_end, turn_start, user_message
from tests.oracle.conftest import Oracle
from tests.oracle.test_dsh_parity import load_logs, mutate

STATIC = ("type", "data", "surfaceOp", "sourceEventSeqs")
CHUNK = "assistant/chunk"
APPEND_LIMIT = 1000


def _static(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: event[key] for key in STATIC if key in event} for event in events]


def _appendable(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in event.items() if key not in ("seq", "time")} for event in events]


def accepted_logs() -> list[list[dict[str, Any]]]:
    """The shared DSH logs forklog accepts as seeds (the others have no Session to compare)."""
    logs = []
    for events in load_logs():
        try:
            seed_log(events, now=0)
        except SessionError:
            continue
        logs.append(events)
    return logs


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data_dir = tmp_path_factory.mktemp("parity") / "data"
    settings = Settings(backend="memory", data_dir=data_dir, fsync=False)
    with TestClient(create_app(settings), base_url="http://localhost") as served:
        wait_ready(served)
        yield served


def _post(client: TestClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code in (200, 201), response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_interrupt_appends_dsh_closers_at_every_seq_inside_an_open_turn(dsh_oracle: Oracle, client: TestClient) -> None:
    logs = accepted_logs()
    assert logs
    cuts = with_calls = 0
    for number, events in enumerate(logs):
        source = f"log{number}"
        _post(client, "/sessions", {"id": source, "seed": events})
        last_turn_end: int | None = None
        turn_start_at: int | None = None
        for seq, event in enumerate(events):
            if event["type"] == "turn/start":
                turn_start_at = seq
            elif event["type"] == "turn/end":
                last_turn_end, turn_start_at = seq, None
            if turn_start_at is None or _inside_a_run(events, seq):
                continue
            cut = f"{source}-{seq}"
            boundary = {"atSeq": last_turn_end} if last_turn_end is not None else {"atTurn": 0}
            _post(client, f"/sessions/{source}/fork", {"sessionId": cut, **boundary})
            tail = _appendable(events[(last_turn_end or -1) + 1 : seq + 1])
            for start in range(0, len(tail), APPEND_LIMIT):
                _post(client, f"/sessions/{cut}/events", {"events": tail[start : start + APPEND_LIMIT]})
            closed = _post(client, f"/sessions/{cut}/interrupt", {"expectedSeq": seq + 1})["events"]
            expected = dsh_oracle.closers(events[turn_start_at : seq + 1])
            assert _static(closed) == _static(expected), f"{source} cut after seq {seq}"
            assert [event["seq"] for event in closed] == [event["seq"] for event in expected]
            assert closed[-1]["data"]["reason"] == {"kind": "interrupted"}
            assert client.delete(f"/sessions/{cut}").status_code == 204
            cuts += 1
            with_calls += any(event["type"] == "tool/result" for event in expected)
    assert cuts > 1000 and with_calls > 0  # the logs hold open turns, some with unanswered tool calls


def _inside_a_run(events: list[dict[str, Any]], seq: int) -> bool:
    """Whether event ``seq`` is a streamed chunk that another one follows."""
    return events[seq]["type"] == CHUNK and seq + 1 < len(events) and events[seq + 1]["type"] == CHUNK


def _renumbered(closers: list[dict[str, Any]], first_seq: int) -> list[dict[str, Any]]:
    """DSH's closers for the same open turn had its log ``first_seq`` events: their seqs and ids follow."""
    renumbered = []
    for offset, closer in enumerate(_static(closers)):
        if closer["type"] == "tool/result":
            data = closer["data"]
            call_id = data["message"]["source"]["callId"]
            message = {**data["message"], "id": f"interrupted-tool-result-{call_id}-{first_seq + offset}"}
            closer = {**closer, "data": {**data, "message": message}}
        renumbered.append(closer)
    return renumbered


def test_the_closers_at_every_seq_of_every_open_turn_are_dsh_closers(dsh_oracle: Oracle) -> None:
    cuts = 0
    for events in accepted_logs():
        log = SessionLog()
        turn_start_at: int | None = None
        waiting: list[tuple[int, list[dict[str, Any]]]] = []  # the cuts inside the current run of chunks
        for seq, event in enumerate(events):
            log.commit(log.stage([event], appended=False, now=0))
            if event["type"] == "turn/start":
                turn_start_at = seq
            elif event["type"] == "turn/end":
                turn_start_at = None
            if turn_start_at is None:
                continue
            cuts += 1
            if _inside_a_run(events, seq):
                waiting.append((seq + 1, closers_for(log.state)))
                continue
            expected = _static(dsh_oracle.closers(events[turn_start_at : seq + 1]))
            assert closers_for(log.state) == expected, f"cut after seq {seq}"
            for count, closers in waiting:
                assert closers == _renumbered(expected, count), f"cut after seq {count - 1}"
            waiting.clear()
    assert cuts > 9000


def test_stats_equal_dsh_fold_on_every_shared_log(dsh_oracle: Oracle, client: TestClient) -> None:
    for number, events in enumerate(accepted_logs()):
        session = _post(client, "/sessions", {"id": f"stats{number}", "seed": events})
        assert session["stats"] == dsh_oracle.stats(events), f"log {number}"
        assert client.get(f"/sessions/stats{number}").json()["stats"] == session["stats"]


def long_session(rng: random.Random) -> list[dict[str, Any]]:
    """Many agent turns with tool calls, usage chunks and reasoning, and an abandoned turn interrupted mid-way."""
    events: list[dict[str, Any]] = []
    for number in range(1, 31):
        if number % 7 == 0:  # a turn whose agent died in its second step: closed as an interrupt closes it
            events += [turn_start(number), user_message("again"), *agent_step(number, 1, calls=2)]
            events += [step_end(number, 1), *agent_step(number, 2, calls=3, answered=rng.randrange(3))]
            events.append({"interrupt": True})
        else:
            events += agent_turn(number, steps=rng.randrange(1, 4))
    return events


def test_stats_equal_dsh_fold_after_every_append_of_a_long_session(dsh_oracle: Oracle, client: TestClient) -> None:
    rng = random.Random(17)
    planned = long_session(rng)
    _post(client, "/sessions", {"id": "long"})
    stored: list[dict[str, Any]] = []
    at = appends = 0
    while at < len(planned):
        if planned[at].get("interrupt"):
            answer = _post(client, "/sessions/long/interrupt", {"expectedSeq": len(stored)})
            at += 1
        else:
            size = rng.randint(1, 4)
            batch = []
            while at < len(planned) and len(batch) < size and not planned[at].get("interrupt"):
                batch.append(planned[at])
                at += 1
            answer = _post(client, "/sessions/long/events", {"events": batch})
        stored += answer["events"]
        appends += 1
        assert answer["session"]["stats"] == dsh_oracle.stats(stored), f"after append {appends}"
    final = client.get("/sessions/long").json()
    assert final["stats"]["turns"] == 30 and final["stats"]["toolMs"] >= 0
    assert final["usage"]["inputTokens"] > 0 and final["usage"] == final["ownUsage"]


@pytest.mark.parametrize("round_", range(3))
def test_mutated_dsh_logs_get_dsh_closers_and_stats(dsh_oracle: Oracle, round_: int) -> None:
    """DSH logs changed at random (as the seed parity test changes them): wherever forklog accepts the log, its
    stats are DSH's fold and, with a turn open, its closers DSH's."""
    rng = random.Random(1700 + round_)
    logs = load_logs()
    compared = 0
    for _ in range(150):
        events = rng.choice(logs)
        for _ in range(rng.randint(1, 2)):
            events = mutate(events, rng)
        if rng.random() < 0.5 and events:  # cut inside the log, often inside a turn
            events = events[: rng.randrange(1, len(events) + 1)]
        try:
            state = seed_log(copy.deepcopy(events), now=0).state
        except SessionError:
            continue
        compared += 1
        assert state.stats.view() == dsh_oracle.stats(events)
        if state.open_turn is not None:
            assert closers_for(state) == _static(dsh_oracle.closers(events))
    assert compared > 30
