"""GET /sessions?q=: every word present, the last as a prefix, over titles, cwd and message text only (spec 12)."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from app.backends.search.sqlite_index import SqliteSearchEngine
from app.domain.access import Scope
from tests.api.builders import assistant_message, step_end, step_start, tool_call, tool_result, turn_end, turn_start
from tests.api.conftest import LOCAL, AppFactory, ClientFactory
from tests.api.helpers import append, assert_invalid_request, create, listed_ids, searched
from tests.api.test_access import wait_for, write_keys
from tests.events import user_message


def _conversation(question: str, answer: str, *, number: int = 1, tool_output: str = "tool output") -> list[Any]:
    return [
        turn_start(number),
        user_message(question),
        step_start(number),
        tool_call(number, 1, f"call-{number}"),
        tool_result(number, 1, f"call-{number}", tool_output),
        assistant_message(number, 1, answer),
        step_end(number),
        turn_end(number),
    ]


def _ids(client: TestClient, q: str, **params: Any) -> list[str]:
    return [item["id"] for item in searched(client, q, **params)]


def test_every_word_must_be_present_and_the_last_may_be_a_prefix(client: TestClient) -> None:
    create(client, id="deploy", seed=_conversation("How do I deploy the service?", "Run make deploy."))
    create(client, id="other", seed=_conversation("Tell me a joke", "Why did the chicken cross"))

    assert _ids(client, "deploy") == ["deploy"]
    assert _ids(client, "deplo") == ["deploy"]
    assert _ids(client, "DEPLOY service") == ["deploy"]
    assert _ids(client, "how deplo") == ["deploy"]
    assert _ids(client, "deplo how") == []  # only the last word may be a prefix
    assert _ids(client, "deploy joke") == []
    assert sorted(_ids(client, "the")) == ["deploy", "other"]


def test_only_titles_cwd_and_message_text_are_searched(client: TestClient) -> None:
    seed = _conversation("plain question", "plain answer", tool_output="secretword in a tool result")
    create(client, id="s", meta={"cwd": "/home/ada/rocket"}, seed=seed)
    create(client, id="named", seed=[{"type": "session/title", "data": {"title": "Lunar plans"}}])

    assert _ids(client, "secretword") == []
    assert _ids(client, "rocket") == ["s"]
    assert _ids(client, "lunar") == ["named"]
    assert _ids(client, "call") == []  # the tool call's id is not message text


def test_a_match_carries_the_seq_and_a_snippet_of_the_first_word(client: TestClient) -> None:
    create(client, id="s", seed=_conversation("where is the config file", "the config file is in /etc"))

    (item,) = searched(client, "config")

    assert item["match"]["seq"] == 1
    assert "config" in item["match"]["snippet"]
    assert len(item["match"]["snippet"]) <= 200
    assert item["id"] == "s" and item["eventCount"] == 8


def test_a_search_sees_an_append_at_once_and_orders_by_last_activity(client: TestClient) -> None:
    create(client, id="a", seed=_conversation("alpha topic", "ok"))
    create(client, id="b", seed=_conversation("alpha topic", "ok"))
    time.sleep(0.02)
    append(client, "a", _conversation("more about zebras", "fine", number=2))

    assert _ids(client, "zebras") == ["a"]
    assert _ids(client, "alpha") == ["a", "b"]  # by updatedAt, newest first
    assert _ids(client, "alpha", order="created", direction="asc") == ["a", "b"]


def test_search_pages_follow_their_cursor(client: TestClient) -> None:
    for number in range(5):
        create(client, id=f"s{number}", seed=_conversation(f"common words {number}", "ok"))
    create(client, id="x", seed=_conversation("nothing here", "ok"))
    assert listed_ids(client, q="common", limit=2) == ["s4", "s3", "s2", "s1", "s0"]
    first = client.get("/sessions", params={"q": "common", "limit": 2}).json()["nextCursor"]
    assert_invalid_request(client.get("/sessions", params={"q": "commo", "cursor": first}), "cursor")


def test_diacritics_and_case(client: TestClient) -> None:
    create(client, id="cafe", seed=_conversation("Un CAFÉ crème", "oui"))
    assert _ids(client, "café") == ["cafe"]
    assert _ids(client, "cafe") == []  # diacritics do not fold
    assert _ids(client, "CRÈME") == ["cafe"]


def test_the_index_survives_a_restart_and_is_rebuilt_when_damaged(make_client: Any, data_dir: Path) -> None:
    first = make_client()
    create(first, id="kept", seed=_conversation("persistent memory", "ok"))
    assert _ids(first, "persistent") == ["kept"]
    first.__exit__(None, None, None)

    again = make_client()
    assert _ids(again, "persistent memo") == ["kept"]
    again.__exit__(None, None, None)

    index = data_dir / "search" / "search.sqlite3"
    if index.exists():  # the file backend keeps it beside the sessions: damage it
        index.write_bytes(b"this is not a database" * 100)
        for suffix in ("-wal", "-shm"):
            Path(f"{index}{suffix}").unlink(missing_ok=True)
    damaged = make_client()
    assert _ids(damaged, "persistent") == ["kept"]
    create(damaged, id="new", seed=_conversation("persistent too", "ok"))
    assert sorted(_ids(damaged, "persistent")) == ["kept", "new"]


def test_filters_combine_with_a_search(client: TestClient) -> None:
    create(client, id="here", meta={"cwd": "/here"}, seed=_conversation("banana bread", "yum"))
    create(client, id="there", meta={"cwd": "/there"}, seed=_conversation("banana split", "yum"))
    assert _ids(client, "banana", cwd="/there") == ["there"]


def test_another_tenants_words_cost_a_search_nothing(make_client: ClientFactory, tmp_path: Path) -> None:
    """Spec 9: nothing of another tenant can be inferred, not even from how long a search takes. Tenant a's 12,000
    words that begin with ``acmesec`` make b's search for that prefix no slower than one for a prefix no one has."""
    keys = write_keys(tmp_path / "keys.jsonl", {name: (name, (Scope.READ, Scope.WRITE)) for name in ("a", "b")})
    client = make_client(keys_file=keys.path)
    secret = " ".join(f"acmesecret{number:06d}" for number in range(12_000))
    made = client.post("/sessions", json={"id": "vault", "seed": [user_message(secret)]}, headers=keys.auth("a"))
    assert made.status_code == 201, made.text
    service = cast(FastAPI, client.app).state.service
    wait_for(lambda: service.searcher.caught_up)  # a's words are in the index: the engine, not a walk, answers b

    def searched_by_b(q: str) -> float:
        started = time.perf_counter()
        answer = client.get("/sessions", params={"q": q}, headers=keys.auth("b"))
        elapsed = time.perf_counter() - started
        assert (answer.status_code, answer.json()["items"]) == (200, [])
        return elapsed

    searched_by_b("acmesec"), searched_by_b("zqxwvut")  # the first of each warms what a search warms
    matching: list[float] = []
    nothing: list[float] = []
    for _ in range(15):
        matching.append(searched_by_b("acmesec"))
        nothing.append(searched_by_b("zqxwvut"))

    ratio = statistics.median(matching) / statistics.median(nothing)
    assert ratio < 1.5, f"b's search for a's prefix took {ratio:.2f}x the time of one that matches nothing"


@pytest.mark.files_only
def test_a_search_still_running_at_shutdown_leaves_no_indexer_behind(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's shutdown stops the indexer for good: a search that meets the closed index meanwhile starts no task
    that would outlive the app ("Task was destroyed but it is pending!")."""
    app = make_app()
    service = app.state.service
    asked = asyncio.Event()
    answer = asyncio.Event()
    candidates = SqliteSearchEngine.candidates

    async def held(engine: SqliteSearchEngine, tenant: str, words: tuple[str, ...]) -> set[str]:
        asked.set()
        await answer.wait()
        return await candidates(engine, tenant, words)

    async def main() -> tuple[int, list[str]]:
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as client:
            while not service.searcher.caught_up:
                await asyncio.sleep(0.01)
            monkeypatch.setattr(SqliteSearchEngine, "candidates", held)
            search = asyncio.create_task(client.get("/sessions", params={"q": "hello"}))
            await asyncio.wait_for(asked.wait(), 5)
            await lifespan.__aexit__(None, None, None)  # the index closes under the search
            answer.set()
            searched = await search
        left = [task.get_name() for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        return searched.status_code, left

    status, left = asyncio.run(main())

    assert status == 200
    assert left == []
