"""Spec 12's fork at a turn or a message with events (edit and regenerate in one call) as a frontend checks it, on
both backends, and the OpenAPI document declaring all of spec 12."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.files import FileBackend, FileOps
from app.domain.clock import wall_clock_ms
from tests.api.builders import (
    as_seed,
    assistant_message,
    note,
    step_end,
    step_start,
    tool_call,
    tool_result,
    turn_end,
    turn_start,
    turns,
    user_message,
)
from tests.api.conftest import ClientFactory
from tests.api.helpers import (
    a_later_millisecond,
    append,
    assert_invalid_request,
    assert_problem,
    create,
    events_of,
    listed_page,
)
from tests.api.test_spec12_acceptance import _found
from tests.events import message_id, question_and_answer

# --- Fork at a turn or a message, with events --------------------------------------------------------------------


def test_boundary_members_must_have_their_types(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    for body, field in (
        ({"atTurn": "1"}, "atTurn"),
        ({"atTurn": 1.5}, "atTurn"),
        ({"atTurn": True}, "atTurn"),
        ({"atMessageId": 3}, "atMessageId"),
        ({"atMessageId": ["x"]}, "atMessageId"),
        ({"events": {"type": "turn/start"}}, "events"),
        ({"events": "x"}, "events"),
        ({"atSeq": 8, "atMessageId": "x"}, "atMessageId"),
    ):
        assert_invalid_request(client.post("/sessions/src/fork", json=body), field)
    assert listed_page(client) == ["src"]


def test_at_turn_with_an_integral_float_and_nulls_as_absent(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    response = client.post("/sessions/src/fork", json={"atTurn": 1.0, "atSeq": None, "atMessageId": None})
    assert response.status_code == 201, response.text
    assert response.json()["seedLength"] == 9
    whole = client.post("/sessions/src/fork", json={"atTurn": None, "events": None})
    assert whole.status_code == 201, whole.text
    assert whole.json()["seedLength"] == 18


def test_at_turn_past_the_last_or_of_an_open_turn_is_an_invalid_boundary(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    assert_problem(client.post("/sessions/src/fork", json={"atTurn": 3}), 422, "INVALID_BOUNDARY")
    create(client, id="empty")
    assert client.post("/sessions/empty/fork", json={"atTurn": 0}).status_code == 201
    assert_problem(client.post("/sessions/empty/fork", json={"atTurn": 1}), 422, "INVALID_BOUNDARY")


def test_at_message_id_of_a_user_message_is_an_invalid_boundary_with_a_reason(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    user_id = next(e["data"]["id"] for e in events_of(client, "src") if e["type"] == "user/message")
    refused = client.post("/sessions/src/fork", json={"atMessageId": user_id})
    body = assert_problem(refused, 422, "INVALID_BOUNDARY")
    assert isinstance(body["reason"], str) and body["reason"]
    assert listed_page(client) == ["src"]


def test_at_message_id_counts_only_messages_after_it_in_its_turn(client: TestClient) -> None:
    looking = assistant_message(1, 1, "let me look")
    done = assistant_message(1, 2, "done")
    call_id = message_id("call")
    seed = [
        turn_start(1),
        user_message("find it"),
        step_start(1),
        looking,
        tool_call(1, 1, call_id),
        tool_result(1, 1, call_id, "found"),
        step_end(1),
        step_start(1, 2),
        done,
        step_end(1, 2),
        turn_end(1, "cancelled"),
        *question_and_answer("next", "ok", number=2),
    ]
    create(client, id="src", seed=seed)

    refused = client.post("/sessions/src/fork", json={"atMessageId": looking["data"]["message"]["id"]})
    assert_problem(refused, 422, "INVALID_BOUNDARY")
    assert refused.json()["reason"]
    child = client.post("/sessions/src/fork", json={"atMessageId": done["data"]["message"]["id"]})
    assert child.status_code == 201, child.text
    assert (child.json()["seedLength"], child.json()["lastEventType"]) == (11, "turn/end")


def test_the_source_is_checked_before_the_boundary(client: TestClient) -> None:
    create(client, id="src", seed=turns(1))
    create(client, id="taken")
    assert_problem(client.post("/sessions/nope/fork", json={"atTurn": 9}), 404, "SESSION_NOT_FOUND")
    assert_problem(
        client.post("/sessions/src/fork", json={"sessionId": "taken", "atMessageId": "unknown"}),
        409,
        "SESSION_ALREADY_EXISTS",
    )
    assert_problem(client.post("/sessions/src/fork", json={"atTurn": 9, "expectedSeq": 3}), 409, "SEQ_CONFLICT")
    assert_problem(client.post("/sessions/src/fork", json={"atTurn": 9, "instance": "other"}), 409, "SESSION_NOT_LIVE")


def test_events_continue_the_seed_get_seqs_and_times_and_leave_seed_length_alone(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    regenerated = [turn_start(2), user_message("question 2"), step_start(2)]

    response = client.post("/sessions/src/fork", json={"sessionId": "kid", "atTurn": 1, "events": regenerated})
    assert response.status_code == 201, response.text
    assert response.headers["location"].endswith("/sessions/kid")
    child = response.json()

    assert (child["seedLength"], child["eventCount"], child["openTurn"]) == (9, 12, 2)
    stored = events_of(client, "kid")
    assert [event["seq"] for event in stored] == list(range(12))
    assert all(isinstance(event["time"], int) for event in stored)
    after = append(client, "kid", [assistant_message(2, 1, "a new answer"), step_end(2), turn_end(2)])
    assert after["session"]["forkable"] is True
    lineage = client.get("/sessions/kid/lineage").json()
    assert [ancestor["id"] for ancestor in lineage["ancestors"]] == ["src"]


def test_events_that_break_the_rules_make_nothing(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    for events, index in (
        ([turn_start(3)], 0),  # the turn after the seed's is 2
        ([turn_start(2), user_message("ok"), turn_start(4)], 2),
        ([{"type": "turn/start"}], 0),
        ([{"data": {}}], 0),
        ([note("fine"), {**note("stamped"), "time": 5}], 1),
    ):
        refused = client.post("/sessions/src/fork", json={"sessionId": "kid", "atTurn": 1, "events": events})
        assert_problem(refused, 422, "INVALID_EVENT", index=index)
        assert_problem(client.get("/sessions/kid"), 404, "SESSION_NOT_FOUND")
    assert listed_page(client) == ["src"]
    assert client.post("/sessions/src/fork", json={"sessionId": "kid", "events": [turn_start(3)]}).status_code == 201


def test_events_after_an_at_message_id_fork(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    first_answer = next(
        e["data"]["message"]["id"] for e in events_of(client, "src") if e["type"] == "assistant/message"
    )
    response = client.post(
        "/sessions/src/fork", json={"atMessageId": first_answer, "events": [turn_start(2), user_message("other")]}
    )
    assert response.status_code == 201, response.text
    assert (response.json()["seedLength"], response.json()["eventCount"]) == (9, 11)


def test_events_after_a_seed_with_future_times_get_later_times(client: TestClient) -> None:
    future = 9_000_000_000_000
    create(client, id="src", seed=as_seed(turns(2), first_time=future))
    create(client, id="plain", seed=turns(1))

    child = client.post("/sessions/src/fork", json={"sessionId": "kid", "atTurn": 1, "events": [turn_start(2)]}).json()

    stored = events_of(client, "kid")
    assert stored[-1]["time"] >= stored[-2]["time"] == future + 8
    assert child["updatedAt"] == stored[-1]["time"] > child["createdAt"]
    assert listed_page(client, order="updated") == ["src", "kid", "plain"]  # future + 17, then future + 8, then now


def test_a_fork_with_events_replays_after_a_restart(make_client: ClientFactory) -> None:
    first = make_client()
    create(first, id="src", seed=turns(2))
    body = {"atTurn": 1, "events": [turn_start(2), user_message("edited")]}
    headers = {"Idempotency-Key": "edit-after-restart"}
    made = first.post("/sessions/src/fork", json=body, headers=headers)
    assert made.status_code == 201, made.text
    first.__exit__(None, None, None)

    again = make_client()
    replayed = again.post("/sessions/src/fork", json=body, headers=headers)

    assert replayed.status_code == 201, replayed.text
    assert replayed.headers.get("idempotent-replayed") == "true"
    assert replayed.json()["id"] == made.json()["id"]
    assert sorted(listed_page(again)) == sorted(["src", made.json()["id"]])


class _KilledMidFork(FileOps):
    """A disk that copies the data directory (the files a kill -9 would leave) at each step of writing a fork's
    child: before its events are written after the seed, and before the whole file is linked in place."""

    def __init__(self, data_dir: Path, copies: Path) -> None:
        self.data_dir, self.copies = data_dir, copies
        self.taken: list[Path] = []
        # Only the child's own file counts: the checkpoint journal, written by a thread of its own whenever it
        # likes, holds the child's preview (the marker) too, and a copy made for it would be no step of the fork.
        self._child_files: set[int] = set()

    def open(self, path: Any, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        if Path(path).name.startswith("kid."):
            self._child_files.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self._child_files.discard(fd)
        super().close(fd)

    def _copy(self) -> None:
        copy = self.copies / f"killed-{len(self.taken)}"
        shutil.copytree(self.data_dir, copy)
        self.taken.append(copy)

    def write_all(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        if fd in self._child_files and b"regenerate-marker" in bytes(data):
            self._copy()
        super().write_all(fd, data)

    def link(self, source: Any, target: Any) -> None:
        if str(target).endswith("kid.jsonl"):
            self._copy()
        super().link(source, target)


@pytest.mark.files_only
def test_a_kill_between_the_seed_and_the_events_leaves_no_child(
    make_client: ClientFactory, data_dir: Path, tmp_path: Path
) -> None:
    disk = _KilledMidFork(data_dir, tmp_path)
    live = make_client(
        create_app(
            Settings(data_dir=data_dir, fsync=False),
            backend=FileBackend(data_dir, clock=wall_clock_ms, ops=disk, sync=False, compression="none"),
        )
    )
    create(live, id="src", seed=turns(2))
    body = {"sessionId": "kid", "atTurn": 1, "events": [turn_start(2), user_message("regenerate-marker")]}
    made = live.post("/sessions/src/fork", json=body)
    assert made.status_code == 201, made.text
    assert len(disk.taken) == 2  # before the events are written, before the file is linked

    for killed in disk.taken:
        after = make_client(create_app(Settings(data_dir=killed, fsync=False)))
        assert_problem(after.get("/sessions/kid"), 404, "SESSION_NOT_FOUND")
        assert after.get("/readyz").json()["corrupt"] == []
        assert listed_page(after) == ["src"]
        assert _found(after, "marker") == []
        again = after.post("/sessions/src/fork", json=body)
        assert again.status_code == 201, again.text
        assert again.json()["eventCount"] == made.json()["eventCount"]


def test_an_idempotency_key_with_other_events_is_reused(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    headers = {"Idempotency-Key": "edit-7"}
    first = client.post(
        "/sessions/src/fork", json={"atTurn": 1, "events": [turn_start(2), user_message("a")]}, headers=headers
    )
    assert first.status_code == 201
    other = client.post(
        "/sessions/src/fork", json={"atTurn": 1, "events": [turn_start(2), user_message("b")]}, headers=headers
    )
    assert_problem(other, 422, "IDEMPOTENCY_KEY_REUSED")
    assert len(listed_page(client)) == 2


def test_a_refused_fork_with_an_idempotency_key_replays_its_refusal_and_makes_nothing(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    body = {"sessionId": "kid", "atTurn": 1, "events": [turn_start(5)]}
    headers = {"Idempotency-Key": "bad-edit"}
    first = client.post("/sessions/src/fork", json=body, headers=headers)
    again = client.post("/sessions/src/fork", json=body, headers=headers)
    assert_problem(first, 422, "INVALID_EVENT", index=0)
    assert_problem(again, 422, "INVALID_EVENT", index=0)
    assert listed_page(client) == ["src"]


def test_the_edited_child_is_listed_and_searched_with_its_new_message(client: TestClient) -> None:
    create(
        client,
        id="src",
        seed=[*question_and_answer("original wording", "ok"), *question_and_answer("second question", "ok", number=2)],
    )
    a_later_millisecond()
    edited = [turn_start(2), user_message("edited wording")]
    child = client.post("/sessions/src/fork", json={"sessionId": "kid", "atTurn": 1, "events": edited}).json()

    assert listed_page(client, order="updated")[0] == "kid"
    assert _found(client, "edited") == ["kid"]
    assert _found(client, "original wording") == ["kid", "src"]
    assert child["preview"] == "original wording"
    assert child["updatedAt"] == max(child["createdAt"], events_of(client, "kid")[-1]["time"])


# --- OpenAPI -----------------------------------------------------------------------------------------------------


def test_the_openapi_document_declares_the_parameters_members_and_problems(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    listing = document["paths"]["/sessions"]["get"]
    names = {parameter["name"] for parameter in listing["parameters"]}
    assert {"order", "direction", "cwd", "origin", "agentPreset", "q", "cursor", "limit", "parent"} <= names
    assert "422" in listing["responses"]

    text = json.dumps(document)
    for member in ("updatedAt", "title", "preview", "bytes", "match", "snippet", "atTurn", "atMessageId"):
        assert f'"{member}"' in text, member
    fork = document["paths"]["/sessions/{id}/fork"]["post"]
    assert {"201", "404", "409", "422"} <= set(fork["responses"])
