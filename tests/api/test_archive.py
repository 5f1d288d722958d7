"""Archive (spec 17): ``PATCH /sessions/{id}`` with ``{"archived": ...}``, the Session's ``archived``, and the
``archived=`` filter of lists and searches, on both backends."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from tests.api.builders import open_turn, turn, turns, user_message
from tests.api.conftest import LOCAL, AppFactory, ClientFactory
from tests.api.helpers import (
    append,
    assert_invalid_request,
    assert_problem,
    create,
    events_of,
    fork,
    get_session,
    listed_ids,
    listed_page,
    searched,
    wait_ready,
)


def archive(client: TestClient, session_id: str, archived: bool = True, **members: Any) -> dict[str, Any]:
    response = client.patch(f"/sessions/{session_id}", json={"archived": archived, **members})
    assert response.status_code == 200, response.text
    session: dict[str, Any] = response.json()
    return session


def test_archiving_answers_the_session_marked_archived_and_writes_no_event(client: TestClient) -> None:
    created = create(client, id="old")
    append(client, "old", turns(2))
    before = get_session(client, "old")
    events = events_of(client, "old")

    archived = archive(client, "old")

    assert archived == {**before, "archived": True}
    assert created["archived"] is False and get_session(client, "old")["archived"] is True
    assert events_of(client, "old") == events  # the log is unchanged
    assert archive(client, "old", False) == before  # unarchived: as it was, bytes and updatedAt included


def test_lists_hide_archived_sessions_unless_asked(client: TestClient) -> None:
    for name in ("a", "b", "c", "d"):
        create(client, id=name)
    archive(client, "b")
    archive(client, "d")

    assert listed_page(client) == ["a", "c"]
    assert listed_page(client, archived="false") == ["a", "c"]
    assert listed_page(client, archived="true") == ["b", "d"]
    assert listed_page(client, archived="any") == ["a", "b", "c", "d"]
    assert listed_page(client, archived="true", order="updated") == ["d", "b"]
    assert listed_ids(client, archived="any", limit=1) == ["a", "b", "c", "d"]  # cursors of that query
    assert listed_ids(client, archived="true", limit=1, direction="desc") == ["d", "b"]


def test_a_cursor_of_one_archived_filter_is_refused_by_another(client: TestClient) -> None:
    for name in ("a", "b", "c"):
        create(client, id=name)
    archive(client, "b")
    cursor = client.get("/sessions", params={"archived": "any", "limit": 1}).json()["nextCursor"]

    response = client.get("/sessions", params={"cursor": cursor, "limit": 1})

    assert_invalid_request(response, "cursor")


@pytest.mark.parametrize("value", ["yes", "False", "", "1"])
def test_a_bad_archived_parameter_is_refused_naming_it(client: TestClient, value: str) -> None:
    assert_invalid_request(client.get("/sessions", params={"archived": value}), "archived")
    assert_invalid_request(client.get("/sessions", params={"archived": value, "q": "deploy"}), "archived")


def test_searches_hide_archived_sessions_unless_asked(client: TestClient) -> None:
    for name in ("kept", "shelved"):
        create(client, id=name)
        append(client, name, [turn(1)[0], user_message("deploy the service"), *turn(1)[2:]])
    archive(client, "shelved")

    assert [item["id"] for item in searched(client, "deploy")] == ["kept"]
    assert [item["id"] for item in searched(client, "deploy", archived="true")] == ["shelved"]
    assert {item["id"] for item in searched(client, "deploy", archived="any")} == {"kept", "shelved"}
    assert searched(client, "deploy", archived="true")[0]["archived"] is True


def test_an_archived_session_is_read_appended_to_and_forked_as_any_other(client: TestClient) -> None:
    create(client, id="old")
    append(client, "old", turn(1))
    archive(client, "old")

    appended = append(client, "old", turn(2))
    child = fork(client, "old", sessionId="kid")

    assert appended["session"]["archived"] is True and appended["session"]["eventCount"] == 2 * len(turn(1))
    assert child["archived"] is False  # a fork's child is not archived
    assert get_session(client, "old")["archived"] is True
    assert client.get("/sessions/old/history").status_code == 200
    lineage = client.get("/sessions/kid/lineage").json()
    assert [ancestor["id"] for ancestor in lineage["ancestors"]] == ["old"]  # lineage shows it, archived or not
    assert [kid["id"] for kid in client.get("/sessions/old/lineage").json()["children"]] == ["kid"]


def test_expected_seq_and_instance_are_checked_as_for_an_append(client: TestClient) -> None:
    created = create(client, id="s")
    append(client, "s", open_turn(1))

    stale = client.patch("/sessions/s", json={"archived": True, "expectedSeq": 1})
    other = client.patch("/sessions/s", json={"archived": True, "instance": "not-it"})
    negative = client.patch("/sessions/s", json={"archived": True, "expectedSeq": -1})

    assert_problem(stale, 409, "SEQ_CONFLICT", currentSeq=len(open_turn(1)))
    assert_problem(other, 409, "SESSION_NOT_LIVE")
    assert_problem(negative, 409, "SEQ_CONFLICT")
    assert get_session(client, "s")["archived"] is False  # nothing was done
    count = len(open_turn(1))
    assert archive(client, "s", expectedSeq=count, instance=created["instance"])["archived"] is True


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "archived"),
        ({"archived": None}, "archived"),
        ({"archived": "true"}, "archived"),
        ({"archived": 1}, "archived"),
        ({"archived": True, "title": "x"}, "title"),
        ({"archived": True, "expectedSeq": "3"}, "expectedSeq"),
        ({"archived": True, "instance": 7}, "instance"),
    ],
)
def test_a_bad_body_is_refused_naming_the_field_and_changes_nothing(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    create(client, id="s")

    assert_invalid_request(client.patch("/sessions/s", json=body), field)
    assert get_session(client, "s")["archived"] is False


def test_a_bad_or_missing_session_is_refused(client: TestClient) -> None:
    assert_problem(client.patch("/sessions/nobody", json={"archived": True}), 404, "SESSION_NOT_FOUND")
    assert_invalid_request(client.patch("/sessions/-bad", json={"archived": True}), "id")
    assert_invalid_request(client.patch("/sessions/s", content=b""), "")


def test_archived_survives_a_restart(make_app: AppFactory, make_client: ClientFactory) -> None:
    with TestClient(make_app(), base_url=LOCAL) as first:
        wait_ready(first)
        for name in ("a", "b", "c"):
            create(first, id=name)
        archive(first, "b")
        archive(first, "c")
        archive(first, "c", False)

    again = make_client()  # the same data directory, or database

    assert get_session(again, "b")["archived"] is True
    assert listed_page(again) == ["a", "c"]
    assert listed_page(again, archived="true") == ["b"]


def test_a_deleted_session_made_again_under_its_id_is_not_archived(
    make_app: AppFactory, make_client: ClientFactory
) -> None:
    with TestClient(make_app(), base_url=LOCAL) as client:
        wait_ready(client)
        create(client, id="s")
        archive(client, "s")
        assert client.delete("/sessions/s").status_code == 204
        assert create(client, id="s")["archived"] is False

    assert get_session(make_client(), "s")["archived"] is False  # the old incarnation's record did not come back


def test_every_postgresql_replica_sees_an_archive_made_through_another(store: str, make_client: ClientFactory) -> None:
    if store != "postgres":
        pytest.skip("two processes share a PostgreSQL database only (a data directory has one owner)")
    one, two = make_client(), make_client()  # two apps on the same database
    create(one, id="s")
    append(two, "s", open_turn(1))  # the second replica now holds the session's tip for its appends

    archive(one, "s")

    assert get_session(two, "s")["archived"] is True
    assert listed_page(two) == [] and listed_page(two, archived="true") == ["s"]
    assert append(two, "s", turn(1)[len(open_turn(1)) :])["session"]["archived"] is True
    archive(two, "s", False)
    assert get_session(one, "s")["archived"] is False
    assert append(one, "s", turn(2))["session"]["archived"] is False
