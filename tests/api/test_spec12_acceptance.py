"""Spec 12 as a frontend checks it, on both backends: the Session members a sidebar shows and the listing
parameters (the sentences the other spec 12 tests leave open). Search and fork: test_spec12_search_acceptance.py and
test_spec12_fork_acceptance.py."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.domain.dsh_records import encode_header
from app.domain.session import SessionHeader
from tests.api.builders import (
    as_seed,
    note,
    step_end,
    step_start,
    turn,
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
    get_session,
    listed_ids,
    listed_page,
    searched,
)
from tests.events import question_and_answer


def _found(client: TestClient, q: str) -> list[str]:
    return sorted(item["id"] for item in searched(client, q))


def _title(title: Any) -> dict[str, Any]:
    return {"type": "session/title", "data": {"title": title, "messageSeqs": [], "source": "model"}}


def _line_bytes(events: list[dict[str, Any]]) -> int:
    return sum(len((json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n").encode()) for event in events)


# --- Session members ---------------------------------------------------------------------------------------------


def test_title_is_the_last_title_events_and_null_without_one(client: TestClient) -> None:
    create(client, id="s", seed=turn(1))
    assert get_session(client, "s")["title"] is None

    append(client, "s", [_title("First name"), note("between"), _title("Second name")])
    assert get_session(client, "s")["title"] == "Second name"

    append(client, "s", [_title("Third name")])
    assert get_session(client, "s")["title"] == "Third name"
    assert listed_page(client, q="second") == []  # the searchable title is the current one
    assert listed_page(client, q="third") == ["s"]


def test_preview_is_the_first_user_message_joined_trimmed_and_cut_at_200_characters(client: TestClient) -> None:
    first = user_message("x")
    first["data"]["content"] = [
        {"type": "text", "text": "  Hello\t\n"},
        {"type": "image", "data": "aGk=", "mimeType": "image/png"},
        {"type": "text", "text": "world  "},
    ]
    create(client, id="joined", seed=[turn_start(1), first, step_start(1), step_end(1), turn_end(1)])
    assert get_session(client, "joined")["preview"] == "Hello world"

    long_text = "😀" * 150 + " " + "é" * 150  # astral characters: cut between characters, not UTF-16 units
    create(client, id="long", seed=[turn_start(1), user_message(long_text), turn_end(1)])
    preview = get_session(client, "long")["preview"]
    assert preview == ("😀" * 150 + " " + "é" * 150)[:200]
    assert len(preview) == 200

    create(client, id="later", seed=question_and_answer("the first question", "ok"))
    append(client, "later", question_and_answer("a second question", "ok", number=2))
    assert get_session(client, "later")["preview"] == "the first question"

    create(client, id="none", seed=[note("no message yet")])
    assert get_session(client, "none")["preview"] is None


def test_updated_at_follows_the_last_event_and_nothing_else(client: TestClient) -> None:
    created = create(client, id="s", seed=turns(1))
    assert created["updatedAt"] == max(created["createdAt"], events_of(client, "s")[-1]["time"])
    a_later_millisecond()

    client.get("/sessions/s/events")
    client.get("/sessions/s/history")
    assert client.post("/sessions/s/snapshot", json={}).status_code == 200
    refused = client.post("/sessions/s/events", json={"events": [turn_start(9)]})
    assert_problem(refused, 422, "INVALID_EVENT", index=0)
    assert client.post("/sessions/s/events", json={"events": [note("x")], "expectedSeq": 0}).status_code == 409
    child = client.post("/sessions/s/fork", json={"sessionId": "kid"}).json()
    assert get_session(client, "s")["updatedAt"] == created["updatedAt"]

    # A fork's child is as new as the fork: its createdAt is later than every event it copied.
    assert child["updatedAt"] == child["createdAt"] > created["updatedAt"]
    a_later_millisecond()
    appended = append(client, "s", [note("touch")])
    last_time = appended["events"][-1]["time"]
    assert appended["session"]["updatedAt"] == last_time == get_session(client, "s")["updatedAt"]
    assert listed_page(client, order="updated") == ["s", "kid"]


def test_bytes_grows_by_the_exported_lines_of_each_append(client: TestClient) -> None:
    created = create(client, id="s", seed=question_and_answer("naïve ☕ question", "réponse"))
    header = (
        f'{{"type":"session","version":0,"id":"s","createdAt":{created["createdAt"]},'
        f'"delegationDepth":0,"instance":"{created["instance"]}"}}\n'
    )
    assert created["bytes"] == len(header.encode()) + _line_bytes(events_of(client, "s"))

    appended = append(client, "s", [note("ünïcödé 😀"), _title("Titel über")])

    assert appended["session"]["bytes"] == created["bytes"] + _line_bytes(appended["events"])
    assert get_session(client, "s")["bytes"] == appended["session"]["bytes"]
    listed = client.get("/sessions").json()["items"][0]
    assert listed["bytes"] == appended["session"]["bytes"]


def test_every_answer_that_carries_a_session_carries_the_new_members(client: TestClient) -> None:
    created = create(client, id="s", seed=[_title("Greeting"), *question_and_answer("hello there", "hi")])
    forked = client.post("/sessions/s/fork", json={"sessionId": "kid"}).json()
    snapshot_source = client.post("/sessions/s/snapshot", json={}).json()["source"]
    appended = append(client, "s", [note("n")])["session"]
    found_items = searched(client, "greeting")
    listed = client.get("/sessions", params={"order": "updated"}).json()["items"]
    lineage = (
        client.get("/sessions/kid/lineage").json()["ancestors"] + client.get("/sessions/s/lineage").json()["children"]
    )

    assert len(lineage) == 2
    for session in (created, forked, snapshot_source, appended, *found_items, *listed, *lineage):
        assert {"updatedAt", "title", "preview", "bytes"} <= set(session), session
        assert session["preview"] == "hello there"
        assert session["title"] == "Greeting"  # the child's seed holds the title event too
        assert isinstance(session["bytes"], int) and session["bytes"] > 0


def test_a_childs_members_are_its_own_log_s(client: TestClient) -> None:
    create(
        client,
        id="src",
        meta={"cwd": "/w"},
        seed=[
            _title("Before"),
            *question_and_answer("first ask", "ok"),
            _title("After"),
            *question_and_answer("second ask", "ok", number=2),
        ],
    )
    # _said is 6 events: the title after turn 1 sits at seq 7, turn 1's turn/end at seq 6.
    at_one = client.post("/sessions/src/fork", json={"sessionId": "one", "atTurn": 1}).json()
    at_zero = client.post("/sessions/src/fork", json={"sessionId": "zero", "atTurn": 0}).json()
    fresh = [turn_start(1), user_message("  brand\n new  "), _title("Fresh")]
    edited = client.post("/sessions/src/fork", json={"sessionId": "new", "atTurn": 0, "events": fresh}).json()

    assert (at_one["title"], at_one["preview"]) == ("Before", "first ask")
    assert (at_zero["title"], at_zero["preview"], at_zero["updatedAt"]) == (None, None, at_zero["createdAt"])
    assert (edited["title"], edited["preview"]) == ("Fresh", "brand new")
    assert get_session(client, "src")["title"] == "After"
    for child in (at_one, at_zero, edited):
        header = SessionHeader(
            child["id"],
            child["createdAt"],
            child["instance"],
            cwd="/w",
            parent_session="src",
            seed_length=child["seedLength"],
        )
        exported = len(encode_header(header)) + _line_bytes(events_of(client, child["id"]))
        assert child["bytes"] == exported == get_session(client, child["id"])["bytes"], child["id"]
    assert _found(client, "fresh brand") == ["new"]
    assert _found(client, "after") == ["src"]
    assert _found(client, "before") == ["one"]  # the source was renamed after the fork point


DSH_LOG = "apps__web__tests__snapshots__approval-composer__session.jsonl"


@pytest.mark.files_only
def test_a_dsh_log_shows_its_title_and_its_bytes_are_its_exports(
    make_client: ClientFactory, data_dir: Path, dsh_logs_dir: Path
) -> None:
    source = dsh_logs_dir / DSH_LOG
    session_id = json.loads(source.read_text().splitlines()[0])["id"]
    (data_dir / "sessions").mkdir(parents=True)
    shutil.copyfile(source, data_dir / "sessions" / f"{session_id}.jsonl")
    client = make_client()
    session = get_session(client, session_id)
    assert session["title"] == "Write a file named notes.txt"
    assert session["preview"] and session["preview"].startswith("Write a file named notes.txt")
    assert listed_page(client, q="notes txt") == [session_id]
    client.__exit__(None, None, None)

    assert session["bytes"] == len(_export(session_id, ["--data-dir", str(data_dir)]))


def _export(session_id: str, store_flags: list[str]) -> bytes:
    exported = subprocess.run(
        [sys.executable, "-m", "app", "export", session_id, *store_flags],
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    ).stdout
    return exported


def test_bytes_is_the_length_export_writes_for_a_seeded_log_and_a_child(
    make_client: ClientFactory, data_dir: Path, store: str, request: pytest.FixtureRequest
) -> None:
    client = make_client()
    seed = [_title("Naïve plan"), *question_and_answer("naïve ☕ question", "réponse 😀")]
    created = create(client, id="dsh", meta={"cwd": "/workspace/é", "agentPreset": "coder"}, seed=as_seed(seed))
    assert created["title"] == "Naïve plan"
    forked = client.post("/sessions/dsh/fork", json={"sessionId": "kid", "events": [turn_start(2)]})
    assert forked.status_code == 201, forked.text
    appended = append(client, "dsh", [note("ünïcödé 😀")])["session"]
    sizes = {"dsh": appended["bytes"], "kid": forked.json()["bytes"]}
    client.__exit__(None, None, None)

    flags = (
        ["--database-url", request.getfixturevalue("forklog_db")]
        if store == "postgres"
        else ["--data-dir", str(data_dir)]
    )
    assert {name: len(_export(name, flags)) for name in sizes} == sizes


def test_a_title_and_a_preview_may_hold_any_character(client: TestClient) -> None:
    odd = "nul\u0000 tab\t bell\u0007 ☕"
    made = client.post("/sessions", json={"id": "s", "seed": [_title(odd), *question_and_answer(odd, "ok")]})
    assert made.status_code == 201, made.text
    assert (made.json()["title"], made.json()["preview"]) == (odd, "nul\u0000 tab bell\u0007 ☕")
    appended = client.post("/sessions/s/events", json={"events": [_title(f"again {odd}")]})
    assert appended.status_code == 201, appended.text
    child = client.post("/sessions/s/fork", json={"sessionId": "kid", "atTurn": 1, "events": [turn_start(2)]})
    assert child.status_code == 201, child.text
    assert (child.json()["title"], child.json()["preview"]) == (odd, made.json()["preview"])
    assert get_session(client, "s")["title"] == f"again {odd}"
    assert _found(client, "bell nul") == ["kid", "s"]


# --- Listing -----------------------------------------------------------------------------------------------------


def test_limit_bounds_hold_for_every_order_and_for_a_search(client: TestClient) -> None:
    create(client, id="s", seed=question_and_answer("limits", "ok"))
    for extra in ({}, {"order": "updated"}, {"q": "limits"}):
        for bad in ("0", "1001", "-1", "ten", "1.5"):
            assert_invalid_request(client.get("/sessions", params={**extra, "limit": bad}), "limit")
        assert client.get("/sessions", params={**extra, "limit": "1000"}).status_code == 200
        assert client.get("/sessions", params={**extra, "limit": "1"}).status_code == 200


def test_the_page_that_holds_the_last_session_has_no_next_cursor(client: TestClient) -> None:
    for number in range(3):
        create(client, id=f"s{number}", seed=question_and_answer("same words", "ok"))
    create(client, id="other")
    cases: list[dict[str, Any]] = [
        {"order": "updated", "limit": 4},
        {"order": "updated", "direction": "asc", "limit": 4},
        {"q": "same", "limit": 3},
        {"q": "same", "order": "created", "limit": 3},
        {"order": "updated", "cwd": "/none", "limit": 1},
    ]
    for params in cases:
        page = client.get("/sessions", params=params).json()
        assert page["nextCursor"] is None, params
    first = client.get("/sessions", params={"q": "same wor", "limit": 2}).json()
    rest = client.get("/sessions", params={"q": "same wor", "limit": 2, "cursor": first["nextCursor"]}).json()
    assert [item["id"] for item in first["items"] + rest["items"]] == ["s2", "s1", "s0"]
    assert rest["nextCursor"] is None


def test_the_default_page_is_100_by_every_order(client: TestClient) -> None:
    for number in range(101):
        create(client, id=f"s{number:03}", seed=question_and_answer("sample", "ok"))
    for params in ({"order": "updated"}, {"q": "sam"}, {"direction": "desc"}):
        page = client.get("/sessions", params=params).json()
        assert len(page["items"]) == 100 and page["nextCursor"], params
        rest = client.get("/sessions", params={**params, "cursor": page["nextCursor"]}).json()
        assert len(rest["items"]) == 1 and rest["nextCursor"] is None, params


def test_order_and_direction_values_are_exact(client: TestClient) -> None:
    for name, value in (("order", "UPDATED"), ("order", ""), ("direction", "DESC"), ("direction", "descending")):
        assert_invalid_request(client.get("/sessions", params={name: value}), name)
    assert_invalid_request(client.get("/sessions", params={"q": "x", "order": "relevance"}), "order")


def test_q_of_200_characters_is_taken_and_of_201_refused(client: TestClient) -> None:
    word = "a" * 200
    create(client, id="s", seed=question_and_answer(word, "ok"))
    assert listed_page(client, q=word) == ["s"]
    assert client.get("/sessions", params={"q": "😀" * 200}).status_code == 200  # characters, not UTF-16 units
    assert_invalid_request(client.get("/sessions", params={"q": "é" * 201}), "q")
    assert_invalid_request(client.get("/sessions", params={"q": "😀" * 201}), "q")


def test_a_search_orders_by_updated_desc_unless_told(client: TestClient) -> None:
    for name in ("a", "b", "c"):
        create(client, id=name, seed=question_and_answer("shared words", "ok"))
    a_later_millisecond()
    append(client, "a", [note("touch")])

    assert listed_page(client, q="shared") == ["a", "c", "b"]
    assert listed_page(client, q="shared", direction="asc") == ["b", "c", "a"]
    assert listed_page(client, q="shared", order="created") == ["a", "b", "c"]
    assert listed_page(client, q="shared", order="created", direction="desc") == ["c", "b", "a"]


def test_order_updated_pages_by_key_with_filters_and_parent(client: TestClient) -> None:
    create(client, id="root", seed=turns(1), meta={"cwd": "/w"})
    for number in range(5):
        assert client.post("/sessions/root/fork", json={"sessionId": f"k{number}"}).status_code == 201
    create(client, id="other", meta={"cwd": "/w"})
    a_later_millisecond()
    append(client, "k1", [note("touch")])

    assert listed_ids(client, order="updated", parent="root", limit=2) == ["k1", "k4", "k3", "k2", "k0"]
    assert listed_page(client, order="updated", cwd="/w") == ["k1", "other", "k4", "k3", "k2", "k0", "root"]
    assert listed_page(client, order="updated", cwd="/w", origin="subagent") == []


def test_a_session_that_changes_while_paging_moves_and_the_others_appear_once(client: TestClient) -> None:
    for number in range(6):
        create(client, id=f"s{number}")
    first = client.get("/sessions", params={"order": "updated", "limit": 3}).json()
    assert [item["id"] for item in first["items"]] == ["s5", "s4", "s3"]
    a_later_millisecond()
    append(client, "s4", [note("moved to the front")])

    rest = client.get("/sessions", params={"order": "updated", "limit": 10, "cursor": first["nextCursor"]}).json()

    assert [item["id"] for item in rest["items"]] == ["s2", "s1", "s0"]
    assert rest["nextCursor"] is None


def test_a_recreated_id_is_searched_by_its_new_log_only(client: TestClient) -> None:
    create(client, id="s", seed=question_and_answer("oldword", "ok"))
    assert _found(client, "oldword") == ["s"]
    assert client.delete("/sessions/s").status_code == 204
    create(client, id="s", seed=question_and_answer("newword", "ok"))

    assert _found(client, "oldword") == []
    assert _found(client, "newword") == ["s"]
    create(client, id="t")
    a_later_millisecond()
    append(client, "s", [note("touch")])
    assert listed_page(client, order="updated") == ["s", "t"]
    assert listed_page(client, order="updated", direction="asc") == ["t", "s"]
    assert listed_page(client) == ["s", "t"]
    time.sleep(1.1)  # once the index has caught up, too
    assert _found(client, "oldword") == []
    assert _found(client, "newword") == ["s"]


def test_a_deleted_session_leaves_the_list_and_the_search(client: TestClient) -> None:
    create(client, id="gone", seed=question_and_answer("ephemeral words", "ok"))
    create(client, id="kept", seed=question_and_answer("ephemeral too", "ok"))
    assert client.delete("/sessions/gone").status_code == 204

    assert listed_page(client, q="ephemeral") == ["kept"]
    assert listed_page(client, order="updated") == ["kept"]


def test_a_cursor_serves_the_same_query_spelled_with_its_defaults(client: TestClient) -> None:
    for number in range(3):
        create(client, id=f"s{number}", seed=question_and_answer("word here", "ok"))
    for made, used, rest in (
        ({"order": "updated"}, {"order": "updated", "direction": "desc"}, ["s1", "s0"]),
        ({}, {"order": "created", "direction": "asc"}, ["s1", "s2"]),
        ({"q": "word"}, {"q": "word", "order": "updated", "direction": "desc"}, ["s1", "s0"]),
    ):
        cursor = client.get("/sessions", params={**made, "limit": 1}).json()["nextCursor"]
        assert listed_page(client, **used, cursor=cursor) == rest, (made, used)


def test_filters_and_cursors_holding_u0000_are_answered_not_refused_by_the_store(client: TestClient) -> None:
    create(client, id="s", meta={"cwd": "/w", "agentPreset": "coder"})
    for params in (
        {"cwd": "/w\u0000"},
        {"origin": "\u0000"},
        {"agentPreset": "co\u0000der", "order": "updated"},
        {"cwd": "\u0000", "q": "w"},
    ):
        assert listed_page(client, **params) == [], params
    forged = base64.urlsafe_b64encode(json.dumps([1, "a\u0000b"]).encode()).decode().rstrip("=")
    for params in ({"cursor": forged}, {"cursor": forged, "order": "updated"}):
        assert_invalid_request(client.get("/sessions", params=params), "cursor")


def test_a_garbage_cursor_is_an_invalid_request(client: TestClient) -> None:
    create(client, id="s")
    for params in ({"cursor": "not-a-cursor"}, {"cursor": "x", "order": "updated"}, {"cursor": "!!", "q": "s"}):
        assert_invalid_request(client.get("/sessions", params=params), "cursor")
