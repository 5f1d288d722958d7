"""Spec 12's search as a frontend checks it, on both backends: the word rule, what is searched, the match, and
what a search sees after appends, restarts, crashes and on another replica."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.domain.access import Scope
from tests.api.builders import (
    assistant_message,
    note,
    step_end,
    step_start,
    turn_end,
    turn_start,
    user_message,
)
from tests.api.conftest import ClientFactory
from tests.api.helpers import a_later_millisecond, append, create, get_session, listed_page, searched
from tests.api.test_access import write_keys
from tests.api.test_spec12_acceptance import _found, _title
from tests.events import question_and_answer

# --- Search ------------------------------------------------------------------------------------------------------


def test_words_are_runs_of_letters_and_digits(client: TestClient) -> None:
    create(client, id="p", seed=question_and_answer("Don't break snake_case or e-mail; version v2.3 (ok)!", "Ready."))
    create(client, id="u", seed=question_and_answer("Ünïcode Straße 東京 тест", "fine"))

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
    create(client, id="s", seed=question_and_answer("running tests quickly", "the deployment worked"))
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
    create(client, id="s", meta={"cwd": "/srv/Quantum_Lab"}, seed=question_and_answer("hello", "hi"))
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
            *question_and_answer("nothing relevant", "still nothing"),
            *question_and_answer(f"{filler} the needle sits here {filler}", "the needle again", number=2),
        ],
    )
    (item,) = searched(client, "needle sits")

    assert item["match"]["seq"] == 7
    snippet = item["match"]["snippet"]
    assert "needle" in snippet and len(snippet) <= 200
    assert snippet in " ".join(f"{filler} the needle sits here {filler}".split())
    session = {key: value for key, value in item.items() if key != "match"}
    assert session == get_session(client, "s")

    (by_prefix,) = searched(client, "sits need")
    assert by_prefix["match"]["seq"] == 7  # the first word, whole: "sits" stands in turn 2's question only
    (later,) = searched(client, "again")
    assert later["match"]["seq"] == 9


def test_every_acknowledged_word_is_found_while_the_index_catches_up(client: TestClient) -> None:
    names = ["a", "b", "c"]
    for name in names:
        create(client, id=name, seed=question_and_answer(f"start {name}", "ok"))
    said: dict[str, str] = {}
    for number in range(2, 32):
        name = names[number % 3]
        word = f"w{number}x{name}"
        append(
            client,
            name,
            question_and_answer(f"common {word}", "ok", number=len([w for w in said.values() if w == name]) + 2),
        )
        said[word] = name
        assert _found(client, word) == [name], word
        assert _found(client, f"common {word[:3]}") == sorted({n for w, n in said.items() if w.startswith(word[:3])})
        time.sleep((number % 4) * 0.1)  # land before, inside and after the indexer's rounds
    for word, name in said.items():
        assert _found(client, word) == [name], word


def test_a_search_sees_an_append_acknowledged_a_second_ago_on_a_restarted_service(make_client: Any) -> None:
    first = make_client()
    create(first, id="s", seed=question_and_answer("before", "ok"))
    append(first, "s", question_and_answer("afterwards zeppelin", "ok", number=2))
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
            json={"id": f"own-{caller}", "seed": question_and_answer("shared secret plan", "ok")},
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
        "search": searched(client, "kept words"),
    }


def _filled(client: TestClient) -> None:
    create(client, id="a", meta={"cwd": "/w"}, seed=[_title("First"), *question_and_answer("kept words here", "ok")])
    create(client, id="b", seed=question_and_answer("kept words too", "fine"))
    a_later_millisecond()
    append(client, "a", [_title("Renamed ü"), *question_and_answer("more kept wordsmith", "ok", number=2)])
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
    create(one, id="old", seed=question_and_answer("nothing", "ok"))
    create(one, id="s", seed=question_and_answer("plain", "ok"))
    a_later_millisecond()
    append(one, "s", [_title("Blimp voyage"), *question_and_answer("dirigible talk", "ok", number=2)])
    time.sleep(1.1)

    assert _found(other, "blimp dirig") == ["s"]
    assert listed_page(other, order="updated") == ["s", "old"]
    assert get_session(other, "s")["title"] == "Blimp voyage"
    edited = other.post("/sessions/s/fork", json={"sessionId": "kid", "atTurn": 1, "events": [turn_start(2)]})
    assert edited.status_code == 201, edited.text
    time.sleep(1.1)
    assert listed_page(one, order="updated")[0] == "kid"
    assert _found(one, "blimp") == ["s"]
