"""Spec 12 as a frontend checks it, on both backends: the sidebar's Session members, listing parameters, the search
word rule and its match, and fork at a turn or a message with events (the sentences the other spec 12 tests leave
open)."""

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

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.files import FileBackend, FileOps
from app.backends.files.codec import encode_header
from app.domain.access import Scope
from app.domain.clock import wall_clock_ms
from app.domain.session import SessionHeader
from tests.api.builders import (
    as_seed,
    assistant_message,
    note,
    step_end,
    step_start,
    tool_call,
    tool_result,
    turn,
    turn_end,
    turn_start,
    turns,
    user_message,
)
from tests.api.conftest import ClientFactory
from tests.api.helpers import append, assert_invalid_request, assert_problem, create, events_of, get_session
from tests.api.test_access import write_keys
from tests.events import message_id


def _later() -> None:
    time.sleep(0.02)  # a later millisecond than every time given so far


def _ids(client: TestClient, **params: Any) -> list[str]:
    response = client.get("/sessions", params=params)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


def _search(client: TestClient, q: str, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/sessions", params={"q": q, **params})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def _found(client: TestClient, q: str) -> list[str]:
    return sorted(item["id"] for item in _search(client, q))


def _title(title: Any) -> dict[str, Any]:
    return {"type": "session/title", "data": {"title": title, "messageSeqs": [], "source": "model"}}


def _said(question: str, answer: str, number: int = 1) -> list[dict[str, Any]]:
    return [
        turn_start(number),
        user_message(question),
        step_start(number),
        assistant_message(number, 1, answer),
        step_end(number),
        turn_end(number),
    ]


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
    assert _ids(client, q="second") == []  # the searchable title is the current one
    assert _ids(client, q="third") == ["s"]


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

    create(client, id="later", seed=_said("the first question", "ok"))
    append(client, "later", _said("a second question", "ok", number=2))
    assert get_session(client, "later")["preview"] == "the first question"

    create(client, id="none", seed=[note("no message yet")])
    assert get_session(client, "none")["preview"] is None


def test_updated_at_follows_the_last_event_and_nothing_else(client: TestClient) -> None:
    created = create(client, id="s", seed=turns(1))
    assert created["updatedAt"] == max(created["createdAt"], events_of(client, "s")[-1]["time"])
    _later()

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
    _later()
    appended = append(client, "s", [note("touch")])
    last_time = appended["events"][-1]["time"]
    assert appended["session"]["updatedAt"] == last_time == get_session(client, "s")["updatedAt"]
    assert _ids(client, order="updated") == ["s", "kid"]


def test_bytes_grows_by_the_exported_lines_of_each_append(client: TestClient) -> None:
    created = create(client, id="s", seed=_said("naïve ☕ question", "réponse"))
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
    created = create(client, id="s", seed=[_title("Greeting"), *_said("hello there", "hi")])
    forked = client.post("/sessions/s/fork", json={"sessionId": "kid"}).json()
    snapshot_source = client.post("/sessions/s/snapshot", json={}).json()["source"]
    appended = append(client, "s", [note("n")])["session"]
    searched = _search(client, "greeting")
    listed = client.get("/sessions", params={"order": "updated"}).json()["items"]
    lineage = (
        client.get("/sessions/kid/lineage").json()["ancestors"] + client.get("/sessions/s/lineage").json()["children"]
    )

    assert len(lineage) == 2
    for session in (created, forked, snapshot_source, appended, *searched, *listed, *lineage):
        assert {"updatedAt", "title", "preview", "bytes"} <= set(session), session
        assert session["preview"] == "hello there"
        assert session["title"] == "Greeting"  # the child's seed holds the title event too
        assert isinstance(session["bytes"], int) and session["bytes"] > 0


def test_a_childs_members_are_its_own_log_s(client: TestClient) -> None:
    create(
        client,
        id="src",
        meta={"cwd": "/w"},
        seed=[_title("Before"), *_said("first ask", "ok"), _title("After"), *_said("second ask", "ok", number=2)],
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
    assert _ids(client, q="notes txt") == [session_id]
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
    seed = [_title("Naïve plan"), *_said("naïve ☕ question", "réponse 😀")]
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
    made = client.post("/sessions", json={"id": "s", "seed": [_title(odd), *_said(odd, "ok")]})
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
    create(client, id="s", seed=_said("limits", "ok"))
    for extra in ({}, {"order": "updated"}, {"q": "limits"}):
        for bad in ("0", "1001", "-1", "ten", "1.5"):
            assert_invalid_request(client.get("/sessions", params={**extra, "limit": bad}), "limit")
        assert client.get("/sessions", params={**extra, "limit": "1000"}).status_code == 200
        assert client.get("/sessions", params={**extra, "limit": "1"}).status_code == 200


def test_the_page_that_holds_the_last_session_has_no_next_cursor(client: TestClient) -> None:
    for number in range(3):
        create(client, id=f"s{number}", seed=_said("same words", "ok"))
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
        create(client, id=f"s{number:03}", seed=_said("sample", "ok"))
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
    create(client, id="s", seed=_said(word, "ok"))
    assert _ids(client, q=word) == ["s"]
    assert client.get("/sessions", params={"q": "😀" * 200}).status_code == 200  # characters, not UTF-16 units
    assert_invalid_request(client.get("/sessions", params={"q": "é" * 201}), "q")
    assert_invalid_request(client.get("/sessions", params={"q": "😀" * 201}), "q")


def test_a_search_orders_by_updated_desc_unless_told(client: TestClient) -> None:
    for name in ("a", "b", "c"):
        create(client, id=name, seed=_said("shared words", "ok"))
    _later()
    append(client, "a", [note("touch")])

    assert _ids(client, q="shared") == ["a", "c", "b"]
    assert _ids(client, q="shared", direction="asc") == ["b", "c", "a"]
    assert _ids(client, q="shared", order="created") == ["a", "b", "c"]
    assert _ids(client, q="shared", order="created", direction="desc") == ["c", "b", "a"]


def test_order_updated_pages_by_key_with_filters_and_parent(client: TestClient) -> None:
    create(client, id="root", seed=turns(1), meta={"cwd": "/w"})
    for number in range(5):
        assert client.post("/sessions/root/fork", json={"sessionId": f"k{number}"}).status_code == 201
    create(client, id="other", meta={"cwd": "/w"})
    _later()
    append(client, "k1", [note("touch")])

    pages: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"order": "updated", "parent": "root", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = client.get("/sessions", params=params).json()
        pages += [item["id"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert pages == ["k1", "k4", "k3", "k2", "k0"]
    assert _ids(client, order="updated", cwd="/w") == ["k1", "other", "k4", "k3", "k2", "k0", "root"]
    assert _ids(client, order="updated", cwd="/w", origin="subagent") == []


def test_a_session_that_changes_while_paging_moves_and_the_others_appear_once(client: TestClient) -> None:
    for number in range(6):
        create(client, id=f"s{number}")
    first = client.get("/sessions", params={"order": "updated", "limit": 3}).json()
    assert [item["id"] for item in first["items"]] == ["s5", "s4", "s3"]
    _later()
    append(client, "s4", [note("moved to the front")])

    rest = client.get("/sessions", params={"order": "updated", "limit": 10, "cursor": first["nextCursor"]}).json()

    assert [item["id"] for item in rest["items"]] == ["s2", "s1", "s0"]
    assert rest["nextCursor"] is None


def test_a_recreated_id_is_searched_by_its_new_log_only(client: TestClient) -> None:
    create(client, id="s", seed=_said("oldword", "ok"))
    assert _found(client, "oldword") == ["s"]
    assert client.delete("/sessions/s").status_code == 204
    create(client, id="s", seed=_said("newword", "ok"))

    assert _found(client, "oldword") == []
    assert _found(client, "newword") == ["s"]
    create(client, id="t")
    _later()
    append(client, "s", [note("touch")])
    assert _ids(client, order="updated") == ["s", "t"]
    assert _ids(client, order="updated", direction="asc") == ["t", "s"]
    assert _ids(client) == ["s", "t"]
    time.sleep(1.1)  # once the index has caught up, too
    assert _found(client, "oldword") == []
    assert _found(client, "newword") == ["s"]


def test_a_deleted_session_leaves_the_list_and_the_search(client: TestClient) -> None:
    create(client, id="gone", seed=_said("ephemeral words", "ok"))
    create(client, id="kept", seed=_said("ephemeral too", "ok"))
    assert client.delete("/sessions/gone").status_code == 204

    assert _ids(client, q="ephemeral") == ["kept"]
    assert _ids(client, order="updated") == ["kept"]


def test_a_cursor_serves_the_same_query_spelled_with_its_defaults(client: TestClient) -> None:
    for number in range(3):
        create(client, id=f"s{number}", seed=_said("word here", "ok"))
    for made, used, rest in (
        ({"order": "updated"}, {"order": "updated", "direction": "desc"}, ["s1", "s0"]),
        ({}, {"order": "created", "direction": "asc"}, ["s1", "s2"]),
        ({"q": "word"}, {"q": "word", "order": "updated", "direction": "desc"}, ["s1", "s0"]),
    ):
        cursor = client.get("/sessions", params={**made, "limit": 1}).json()["nextCursor"]
        assert _ids(client, **used, cursor=cursor) == rest, (made, used)


def test_filters_and_cursors_holding_u0000_are_answered_not_refused_by_the_store(client: TestClient) -> None:
    create(client, id="s", meta={"cwd": "/w", "agentPreset": "coder"})
    for params in (
        {"cwd": "/w\u0000"},
        {"origin": "\u0000"},
        {"agentPreset": "co\u0000der", "order": "updated"},
        {"cwd": "\u0000", "q": "w"},
    ):
        assert _ids(client, **params) == [], params
    forged = base64.urlsafe_b64encode(json.dumps([1, "a\u0000b"]).encode()).decode().rstrip("=")
    for params in ({"cursor": forged}, {"cursor": forged, "order": "updated"}):
        assert_invalid_request(client.get("/sessions", params=params), "cursor")


def test_a_garbage_cursor_is_an_invalid_request(client: TestClient) -> None:
    create(client, id="s")
    for params in ({"cursor": "not-a-cursor"}, {"cursor": "x", "order": "updated"}, {"cursor": "!!", "q": "s"}):
        assert_invalid_request(client.get("/sessions", params=params), "cursor")


# --- Search ------------------------------------------------------------------------------------------------------


def test_words_are_runs_of_letters_and_digits(client: TestClient) -> None:
    create(client, id="p", seed=_said("Don't break snake_case or e-mail; version v2.3 (ok)!", "Ready."))
    create(client, id="u", seed=_said("Ünïcode Straße 東京 тест", "fine"))

    for q in ("snake case", "e mail", "don t", "v2 3", "ready", "version", "ok"):
        assert _found(client, q) == ["p"], q
    assert _found(client, "snake_case") == ["p"]  # the query's own punctuation splits its words
    assert _found(client, "e-mail!") == ["p"]
    assert _found(client, "nake") == []  # a word, or the start of one: never its middle
    assert _found(client, "mail e") == ["p"]  # the last word may be a whole word too
    assert _found(client, "straße") == ["u"]
    assert _found(client, "東京") == ["u"]
    assert _found(client, "\u0422\u0415\u0421\u0422") == ["u"]
    assert _found(client, "ünï") == ["u"]


def test_every_word_must_be_whole_except_the_last(client: TestClient) -> None:
    create(client, id="s", seed=_said("running tests quickly", "the deployment worked"))
    assert _found(client, "run") == ["s"]  # a prefix as the last word
    assert _found(client, "run tests") == []  # stems never stand for words: "run" is not a word here
    assert _found(client, "running deploy") == ["s"]
    assert _found(client, "running deployments") == []
    assert _found(client, "tests tests quick") == ["s"]
    assert _found(client, "the worked") == ["s"]  # common words count like any other


def test_reasoning_tool_calls_and_other_events_are_not_searched(client: TestClient) -> None:
    answer = assistant_message(1, 1, "visible answer")
    answer["data"]["message"]["content"].insert(0, {"type": "reasoning", "text": "hiddenthought"})
    seed = [
        turn_start(1),
        user_message("visible question"),
        step_start(1),
        {"type": "assistant/chunk", "data": {"turn": 1, "step": 1, "chunk": {"type": "text", "text": "chunkword"}}},
        answer,
        step_end(1),
        turn_end(1),
        note("noteword"),
    ]
    create(client, id="s", seed=seed)

    assert _found(client, "visible") == ["s"]
    for q in ("hiddenthought", "chunkword", "noteword", "completed"):
        assert _found(client, q) == [], q


def test_an_appended_title_and_cwd_are_searched(client: TestClient) -> None:
    create(client, id="s", meta={"cwd": "/srv/Quantum_Lab"}, seed=_said("hello", "hi"))
    assert _found(client, "quantum lab") == ["s"]
    assert _found(client, "srv quant") == ["s"]
    append(client, "s", [_title("Orbital mechanics")])
    assert _found(client, "orbital quantum") == ["s"]


def test_the_match_names_the_first_message_that_holds_the_first_word(client: TestClient) -> None:
    filler = "lorem ipsum " * 40
    create(
        client,
        id="s",
        seed=[
            *_said("nothing relevant", "still nothing"),
            *_said(f"{filler} the needle sits here {filler}", "the needle again", number=2),
        ],
    )
    (item,) = _search(client, "needle sits")

    assert item["match"]["seq"] == 7
    snippet = item["match"]["snippet"]
    assert "needle" in snippet and len(snippet) <= 200
    assert snippet in " ".join(f"{filler} the needle sits here {filler}".split())
    session = {key: value for key, value in item.items() if key != "match"}
    assert session == get_session(client, "s")

    (by_prefix,) = _search(client, "sits need")
    assert by_prefix["match"]["seq"] == 7  # the first word, whole: "sits" stands in turn 2's question only
    (later,) = _search(client, "again")
    assert later["match"]["seq"] == 9


def test_every_acknowledged_word_is_found_while_the_index_catches_up(client: TestClient) -> None:
    names = ["a", "b", "c"]
    for name in names:
        create(client, id=name, seed=_said(f"start {name}", "ok"))
    said: dict[str, str] = {}
    for number in range(2, 32):
        name = names[number % 3]
        word = f"w{number}x{name}"
        append(client, name, _said(f"common {word}", "ok", number=len([w for w in said.values() if w == name]) + 2))
        said[word] = name
        assert _found(client, word) == [name], word
        assert _found(client, f"common {word[:3]}") == sorted({n for w, n in said.items() if w.startswith(word[:3])})
        time.sleep((number % 4) * 0.1)  # land before, inside and after the indexer's rounds
    for word, name in said.items():
        assert _found(client, word) == [name], word


def test_a_search_sees_an_append_acknowledged_a_second_ago_on_a_restarted_service(make_client: Any) -> None:
    first = make_client()
    create(first, id="s", seed=_said("before", "ok"))
    append(first, "s", _said("afterwards zeppelin", "ok", number=2))
    first.__exit__(None, None, None)

    again = make_client()
    assert _found(again, "zeppelin") == ["s"]
    append(again, "s", [_title("Airship")])
    time.sleep(1.1)
    assert _found(again, "airship zepp") == ["s"]


def test_a_search_and_a_list_hold_only_the_callers_tenant(make_client: ClientFactory, tmp_path: Any) -> None:
    keys = write_keys(
        tmp_path / "keys.jsonl", {"a": ("a", (Scope.READ, Scope.WRITE)), "b": ("b", (Scope.READ, Scope.WRITE))}
    )
    client = make_client(keys_file=keys.path)
    for caller in ("a", "b"):
        made = client.post(
            "/sessions",
            json={"id": f"own-{caller}", "seed": _said("shared secret plan", "ok")},
            headers=keys.auth(caller),
        )
        assert made.status_code == 201, made.text

    for caller in ("a", "b"):
        for params in ({"q": "secret"}, {"q": "shared sec"}, {"order": "updated"}, {"cwd": "/nowhere"}):
            found = client.get("/sessions", params=params, headers=keys.auth(caller))
            assert found.status_code == 200, found.text
            expected = [] if "cwd" in params else [f"own-{caller}"]
            assert [item["id"] for item in found.json()["items"]] == expected, (caller, params)


def _sidebar(client: TestClient) -> dict[str, Any]:
    """What a sidebar shows, by every order a frontend asks for."""
    return {
        "updated": client.get("/sessions", params={"order": "updated"}).json()["items"],
        "created": client.get("/sessions", params={"direction": "desc"}).json()["items"],
        "search": _search(client, "kept words"),
    }


def _filled(client: TestClient) -> None:
    create(client, id="a", meta={"cwd": "/w"}, seed=[_title("First"), *_said("kept words here", "ok")])
    create(client, id="b", seed=_said("kept words too", "fine"))
    _later()
    append(client, "a", [_title("Renamed ü"), *_said("more kept wordsmith", "ok", number=2)])
    assert (
        client.post("/sessions/a/fork", json={"sessionId": "c", "atTurn": 1, "events": [turn_start(2)]}).status_code
        == 201
    )


def test_the_members_order_and_search_are_the_same_after_a_restart(make_client: ClientFactory) -> None:
    first = make_client()
    _filled(first)
    before = _sidebar(first)
    assert [item["id"] for item in before["updated"]] == ["c", "a", "b"]
    first.__exit__(None, None, None)

    again = make_client()
    assert _sidebar(again) == before


@pytest.mark.files_only
def test_the_members_order_and_search_survive_a_crash(
    make_client: ClientFactory, data_dir: Path, tmp_path: Path
) -> None:
    live = make_client()
    _filled(live)
    before = _sidebar(live)
    crashed = tmp_path / "crashed"
    shutil.copytree(data_dir, crashed)  # the files as a kill -9 leaves them: no shutdown ran
    with (crashed / "sessions" / "a.jsonl").open("ab") as torn:  # and a line it was writing, never acknowledged
        torn.write(b'{"type":"session/title","data":{"title":"Torn wor')

    after = make_client(create_app(Settings(data_dir=crashed, fsync=False)))
    assert _sidebar(after) == before
    assert _found(after, "torn") == []


def test_a_replica_lists_and_finds_what_another_acknowledged(make_client: ClientFactory, store: str) -> None:
    if store != "postgres":
        pytest.skip("a data directory has one process: replicas share a database")
    one, other = make_client(), make_client()
    create(one, id="old", seed=_said("nothing", "ok"))
    create(one, id="s", seed=_said("plain", "ok"))
    _later()
    append(one, "s", [_title("Blimp voyage"), *_said("dirigible talk", "ok", number=2)])
    time.sleep(1.1)

    assert _found(other, "blimp dirig") == ["s"]
    assert _ids(other, order="updated") == ["s", "old"]
    assert get_session(other, "s")["title"] == "Blimp voyage"
    edited = other.post("/sessions/s/fork", json={"sessionId": "kid", "atTurn": 1, "events": [turn_start(2)]})
    assert edited.status_code == 201, edited.text
    time.sleep(1.1)
    assert _ids(one, order="updated")[0] == "kid"
    assert _found(one, "blimp") == ["s"]


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
    assert _ids(client) == ["src"]


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
    assert _ids(client) == ["src"]


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
        *_said("next", "ok", number=2),
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
    assert _ids(client) == ["src"]
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
    assert _ids(client, order="updated") == ["src", "kid", "plain"]  # future + 17, then future + 8, then now


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
    assert sorted(_ids(again)) == sorted(["src", made.json()["id"]])


class _KilledMidFork(FileOps):
    """A disk that copies the data directory (the files a kill -9 would leave) at each step of writing a fork's
    child: before its events are written after the seed, and before the whole file is linked in place."""

    def __init__(self, data_dir: Path, copies: Path) -> None:
        self.data_dir, self.copies = data_dir, copies
        self.taken: list[Path] = []

    def _copy(self) -> None:
        copy = self.copies / f"killed-{len(self.taken)}"
        shutil.copytree(self.data_dir, copy)
        self.taken.append(copy)

    def write_all(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        if b"regenerate-marker" in bytes(data):
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
            backend=FileBackend(data_dir, clock=wall_clock_ms, ops=disk, sync=False),
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
        assert _ids(after) == ["src"]
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
    assert len(_ids(client)) == 2


def test_a_refused_fork_with_an_idempotency_key_replays_its_refusal_and_makes_nothing(client: TestClient) -> None:
    create(client, id="src", seed=turns(2))
    body = {"sessionId": "kid", "atTurn": 1, "events": [turn_start(5)]}
    headers = {"Idempotency-Key": "bad-edit"}
    first = client.post("/sessions/src/fork", json=body, headers=headers)
    again = client.post("/sessions/src/fork", json=body, headers=headers)
    assert_problem(first, 422, "INVALID_EVENT", index=0)
    assert_problem(again, 422, "INVALID_EVENT", index=0)
    assert _ids(client) == ["src"]


def test_the_edited_child_is_listed_and_searched_with_its_new_message(client: TestClient) -> None:
    create(client, id="src", seed=[*_said("original wording", "ok"), *_said("second question", "ok", number=2)])
    _later()
    edited = [turn_start(2), user_message("edited wording")]
    child = client.post("/sessions/src/fork", json={"sessionId": "kid", "atTurn": 1, "events": edited}).json()

    assert _ids(client, order="updated")[0] == "kid"
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
