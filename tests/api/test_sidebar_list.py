"""GET /sessions by last activity, filtered, with cursors that belong to their query (spec 12); the Session's
title, preview, bytes and updatedAt as a sidebar reads them."""

from __future__ import annotations

import json

from starlette.testclient import TestClient

from tests.api.builders import note, turn, turn_end, turn_start, user_message
from tests.api.helpers import (
    a_later_millisecond,
    append,
    assert_invalid_request,
    create,
    get_session,
    listed_ids,
    listed_page,
)


def test_order_updated_lists_the_most_recently_active_first(client: TestClient) -> None:
    for name in ("a", "b", "c"):
        create(client, id=name)
    a_later_millisecond()
    append(client, "a", [note("again")])

    assert listed_page(client, order="updated") == ["a", "c", "b"]
    assert listed_page(client, order="updated", direction="asc") == ["b", "c", "a"]
    assert listed_page(client) == ["a", "b", "c"]  # created, asc: as before
    assert listed_page(client, direction="desc") == ["c", "b", "a"]
    session = get_session(client, "a")
    assert session["updatedAt"] > session["createdAt"]


def test_pages_by_updated_hold_each_session_once(client: TestClient) -> None:
    for number in range(7):
        create(client, id=f"s{number}")
    a_later_millisecond()
    append(client, "s3", [note("touch")])

    assert listed_ids(client, order="updated", limit=2) == ["s3", "s6", "s5", "s4", "s2", "s1", "s0"]
    assert listed_ids(client, order="updated", direction="asc", limit=3) == ["s0", "s1", "s2", "s4", "s5", "s6", "s3"]


def test_filters_keep_the_sessions_whose_header_field_equals_the_value(client: TestClient) -> None:
    create(client, id="plain")
    create(client, id="here", meta={"cwd": "/here"})
    create(client, id="sub", meta={"cwd": "/here", "origin": "subagent", "agentPreset": "coder"})

    assert listed_page(client, cwd="/here") == ["here", "sub"]
    assert listed_page(client, origin="subagent") == ["sub"]
    assert listed_page(client, agentPreset="coder", order="updated") == ["sub"]
    assert listed_page(client, cwd="/elsewhere") == []
    assert listed_ids(client, cwd="/here", limit=1) == ["here", "sub"]


def test_a_cursor_belongs_to_its_query(client: TestClient) -> None:
    for name in ("a", "b", "c"):
        create(client, id=name, meta={"cwd": "/w"})
    by_update = client.get("/sessions", params={"order": "updated", "limit": 1}).json()["nextCursor"]
    plain = client.get("/sessions", params={"limit": 1}).json()["nextCursor"]
    assert by_update and plain

    for params in (
        {"cursor": by_update},
        {"cursor": by_update, "order": "updated", "direction": "asc"},
        {"cursor": by_update, "order": "updated", "cwd": "/w"},
        {"cursor": plain, "order": "updated"},
        {"cursor": plain, "direction": "desc"},
        {"cursor": plain, "cwd": "/w"},
        {"cursor": plain, "q": "hello"},
        {"cursor": plain, "parent": "a"},
    ):
        assert_invalid_request(client.get("/sessions", params=params), "cursor")
    assert client.get("/sessions", params={"cursor": by_update, "order": "updated"}).status_code == 200
    assert listed_page(client, cursor=plain, limit=5) == ["b", "c"]


def test_bad_list_parameters_are_refused(client: TestClient) -> None:
    assert_invalid_request(client.get("/sessions", params={"order": "name"}), "order")
    assert_invalid_request(client.get("/sessions", params={"direction": "up"}), "direction")
    assert_invalid_request(client.get("/sessions", params={"q": ""}), "q")
    assert_invalid_request(client.get("/sessions", params={"q": "x" * 201}), "q")


def test_title_and_preview_come_from_the_log(client: TestClient) -> None:
    named = {"type": "session/title", "data": {"title": "Deploy plan", "messageSeqs": [1], "source": "model"}}
    create(client, id="s", seed=[turn_start(1), user_message("  How   do I\n deploy?  "), turn_end(1)])
    assert (get_session(client, "s")["title"], get_session(client, "s")["preview"]) == (None, "How do I deploy?")

    session = append(client, "s", [named])["session"]

    assert (session["title"], session["preview"]) == ("Deploy plan", "How do I deploy?")
    listed = client.get("/sessions", params={"order": "updated"}).json()["items"][0]
    assert listed == get_session(client, "s") == session


def test_bytes_is_the_length_of_the_export(client: TestClient) -> None:
    created = create(client, id="s", meta={"cwd": "/work"}, seed=turn(1))
    header = (
        f'{{"type":"session","version":0,"id":"s","createdAt":{created["createdAt"]},"cwd":"/work",'
        f'"delegationDepth":0,"instance":"{created["instance"]}"}}\n'
    )
    stored = client.get("/sessions/s/events").json()["events"]
    lines = "".join(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n" for event in stored)
    assert created["bytes"] == len(header.encode()) + len(lines.encode())
