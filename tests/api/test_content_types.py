"""What a request body and a path may be: content types, sizes, lossless JSON, nesting, path ids, query params."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.api.settings import Settings
from tests.api.builders import as_seed, nested_list, note, turn, user_message
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import (
    append,
    assert_invalid_request,
    assert_problem,
    create,
    events_of,
    get_session,
    history_of,
    serve,
)

LIMIT = 2048
BODY_ROUTES = ["/sessions", "/sessions/s/events", "/sessions/s/snapshot", "/sessions/s/fork"]


@pytest.fixture
def small(make_client: ClientFactory) -> TestClient:
    """A client of a service that takes bodies of at most 2048 bytes; session ``s`` holds one turn."""
    client = make_client(max_body_bytes=LIMIT)
    create(client, id="s", seed=turn(1))
    return client


def _post(client: TestClient, path: str, body: bytes, content_type: str | None = "application/json") -> Any:
    headers = {} if content_type is None else {"content-type": content_type}
    return client.post(path, content=body, headers=headers)


def _valid_body(path: str) -> bytes:
    if path == "/sessions":
        return b'{"id": "new"}'
    if path.endswith("/events"):
        return json.dumps({"events": [note("a")]}).encode()
    return b'{"atSeq": 8}'


# -- content types ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;charset=UTF-8",
        "application/merge-patch+json",
        "application/vnd.forklog.session+json; version=2",
        None,
    ],
)
@pytest.mark.parametrize("path", BODY_ROUTES)
def test_a_json_content_type_is_json(client: TestClient, path: str, content_type: str | None) -> None:
    create(client, id="s", seed=turn(1))

    response = _post(client, path, _valid_body(path), content_type)

    assert response.status_code in (200, 201), response.text


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "application/json-seq",
        "application/xml",
        "json",
    ],
)
@pytest.mark.parametrize("path", BODY_ROUTES)
def test_any_other_content_type_is_415(client: TestClient, path: str, content_type: str) -> None:
    create(client, id="s", seed=turn(1))

    assert_problem(_post(client, path, _valid_body(path), content_type), 415, "UNSUPPORTED_MEDIA_TYPE")
    assert client.get("/readyz").json()["sessions"] == 1
    assert get_session(client, "s")["eventCount"] == 9


@pytest.mark.parametrize("content_type", [None, "application/json", "text/plain", "application/octet-stream"])
@pytest.mark.parametrize(
    ("path", "status"), [("/sessions", 201), ("/sessions/s/snapshot", 200), ("/sessions/s/fork", 201)]
)
def test_an_empty_body_counts_as_an_empty_object(
    client: TestClient, path: str, status: int, content_type: str | None
) -> None:
    create(client, id="s", seed=turn(1))

    assert _post(client, path, b"", content_type).status_code == status


def test_an_empty_chunked_body_counts_as_an_empty_object(client: TestClient) -> None:
    def nothing() -> Iterator[bytes]:
        yield b""

    response = client.post("/sessions", content=nothing(), headers={"content-type": "text/plain"})

    assert response.status_code == 201, response.text


def test_an_empty_append_body_is_malformed(client: TestClient) -> None:
    create(client, id="s")

    assert_invalid_request(_post(client, "/sessions/s/events", b""), "")
    assert_invalid_request(_post(client, "/sessions/s/events", b"", None), "")


def test_an_empty_append_body_that_is_not_json_is_415(client: TestClient) -> None:
    create(client, id="s")

    assert_problem(_post(client, "/sessions/s/events", b"", "text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE")


# -- sizes ------------------------------------------------------------------------------------------------------------


def _append_body_of(size: int) -> bytes:
    """An append body of exactly ``size`` bytes."""
    body = json.dumps({"events": [note("")]}).encode()
    padding = size - len(body)
    assert padding >= 0
    return json.dumps({"events": [note("x" * padding)]}).encode()


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_a_body_over_the_limit_is_413(small: TestClient, path: str) -> None:
    response = _post(small, path, _append_body_of(LIMIT + 1))

    assert_problem(response, 413, "PAYLOAD_TOO_LARGE")
    assert get_session(small, "s")["eventCount"] == 9


def test_a_body_at_the_limit_is_taken(small: TestClient) -> None:
    body = _append_body_of(LIMIT)
    assert len(body) == LIMIT

    assert _post(small, "/sessions/s/events", body).status_code == 201


def test_413_is_decided_before_parsing(small: TestClient) -> None:
    assert_problem(_post(small, "/sessions/s/events", b"{" * (LIMIT + 1)), 413, "PAYLOAD_TOO_LARGE")


def test_a_chunked_body_over_the_limit_is_413(small: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        body = _append_body_of(LIMIT + 500)
        for start in range(0, len(body), 100):
            yield body[start : start + 100]

    response = small.post("/sessions/s/events", content=chunks())

    assert "content-length" not in response.request.headers
    assert_problem(response, 413, "PAYLOAD_TOO_LARGE")
    assert get_session(small, "s")["eventCount"] == 9


def test_415_comes_before_413(small: TestClient) -> None:
    assert_problem(_post(small, "/sessions/s/events", b"x" * (LIMIT * 2), "text/plain"), 415, "UNSUPPORTED_MEDIA_TYPE")


def test_413_is_decided_from_content_length_without_reading_the_body(make_app: AppFactory) -> None:
    app = make_app(max_body_bytes=LIMIT)
    reads: list[str] = []
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        reads.append("read")
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/sessions",
        "raw_path": b"/sessions",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"), (b"content-length", b"1000000")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }

    async def main() -> None:
        async with app.router.lifespan_context(app):
            await app(scope, receive, send)

    asyncio.run(main())

    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["code"] == "PAYLOAD_TOO_LARGE"
    assert reads == []


def test_the_default_limit_is_16_mib() -> None:
    assert Settings().max_body_bytes == 16 * 1024 * 1024


# -- malformed JSON ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"{", id="unclosed"),
        pytest.param(b'{"id": }', id="no-value"),
        pytest.param(b"{'id': 'x'}", id="single-quotes"),
        pytest.param(b'{"id": "x"} {}', id="trailing-data"),
        pytest.param(b'{"id": "x",}', id="trailing-comma"),
        pytest.param(b'{"id": "\xff"}', id="not-utf-8"),
        pytest.param(b"   ", id="blank"),
    ],
)
@pytest.mark.parametrize("path", BODY_ROUTES)
def test_a_body_that_does_not_parse_is_invalid_request(client: TestClient, path: str, body: bytes) -> None:
    create(client, id="s", seed=turn(1))

    assert_invalid_request(_post(client, path, body), "")


# -- lossless JSON ----------------------------------------------------------------------------------------------------

BREAKS = [
    pytest.param(b'{"k": 1, "k": 2}', id="duplicate-key"),
    pytest.param(b"-0", id="minus-zero"),
    pytest.param(b"-0.0e7", id="minus-zero-exponent"),
    pytest.param(b"1e400", id="overflow"),
    pytest.param(b"-1e400", id="negative-overflow"),
    pytest.param(b"9007199254740992", id="2-to-the-53"),
    pytest.param(b"-9007199254740992", id="minus-2-to-the-53"),
    pytest.param(b"9007199254740992.0", id="2-to-the-53-as-float"),
    pytest.param(b"1e16", id="beyond-safe-in-exponent-notation"),
    pytest.param(b'"\\ud800"', id="lone-high-surrogate"),
    pytest.param(b'"a\\udc00b"', id="lone-low-surrogate"),
    pytest.param(b'{"\\ud83d": 1}', id="lone-surrogate-in-a-key"),
]


def _note_with(value: bytes) -> bytes:
    return b'{"type": "forklog-test/note", "data": {"value": ' + value + b"}}"


def _events_body(*events: bytes) -> bytes:
    return b'{"events": [' + b", ".join(events) + b"]}"


@pytest.mark.parametrize("value", BREAKS)
def test_a_lossless_break_in_an_appended_event_is_invalid_event(client: TestClient, value: bytes) -> None:
    create(client, id="s")
    fine = json.dumps(note("fine")).encode()

    response = _post(client, "/sessions/s/events", _events_body(fine, fine, _note_with(value), fine))

    assert_problem(response, 422, "INVALID_EVENT", index=2)
    assert get_session(client, "s")["eventCount"] == 0


@pytest.mark.parametrize("value", BREAKS)
def test_a_lossless_break_in_a_seed_event_is_invalid_seed(client: TestClient, value: bytes) -> None:
    seed = [json.dumps(event).encode() for event in as_seed(turn(1))]
    seed[4] = seed[4][:-1] + b', "extra": ' + value + b"}"

    response = _post(client, "/sessions", b'{"id": "s", "seed": [' + b", ".join(seed) + b"]}")

    assert_problem(response, 422, "INVALID_SEED", index=4)
    assert_problem(client.get("/sessions/s"), 404, "SESSION_NOT_FOUND")


def test_the_lowest_index_wins_between_a_break_and_a_rule(client: TestClient) -> None:
    create(client, id="s")
    with_seq = json.dumps({**note("a"), "seq": 0}).encode()
    broken = _note_with(b"-0")
    fine = json.dumps(note("fine")).encode()

    rule_first = _post(client, "/sessions/s/events", _events_body(fine, with_seq, broken))
    break_first = _post(client, "/sessions/s/events", _events_body(fine, broken, with_seq))

    assert "seq" in assert_problem(rule_first, 422, "INVALID_EVENT", index=1)["reason"]
    assert_problem(break_first, 422, "INVALID_EVENT", index=1)


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/sessions/s/events", b'{"events": [{"type": "x/y", "data": 1}], "expectedSeq": -0}', "expectedSeq"),
        ("/sessions/s/events", b'{"events": [{"type": "x/y", "data": 1}], "instance": "\\ud800"}', "instance"),
        ("/sessions/s/events", b'{"events": {"a": 1, "a": 2}}', "events"),
        ("/sessions", b'{"meta": {"cwd": "/a", "cwd": "/b"}}', "meta"),
        ("/sessions", b'{"meta": {"createdAt": 9007199254740992}}', "meta.createdAt"),
        ("/sessions", b'{"source": {"seedLength": 1e400}, "seed": []}', "source.seedLength"),
        ("/sessions", b'{"id": "a", "id": "b"}', ""),
        ("/sessions/s/snapshot", b'{"atSeq": 1e400}', "atSeq"),
        ("/sessions/s/fork", b'{"expectedSeq": -0.0}', "expectedSeq"),
        ("/sessions/s/fork", b'{"sessionId": "\\udfff"}', "sessionId"),
    ],
)
def test_a_lossless_break_elsewhere_is_invalid_request(client: TestClient, path: str, body: bytes, field: str) -> None:
    create(client, id="s", seed=turn(1))

    assert_invalid_request(_post(client, path, body), field)
    assert client.get("/readyz").json()["sessions"] == 1


def test_a_number_that_underflows_is_taken_as_zero(client: TestClient) -> None:
    create(client, id="s")

    response = _post(client, "/sessions/s/events", _events_body(_note_with(b"-1e-400")))

    assert response.status_code == 201, response.text
    assert events_of(client, "s")[0]["data"] == {"value": 0}


# -- nesting ----------------------------------------------------------------------------------------------------------


def _nested_event_body(depth: int) -> bytes:
    """An append body nesting ``depth`` levels in all: the body, events, the event, then ``data``."""
    return json.dumps({"events": [{"type": "x/y", "data": nested_list(depth - 3)}]}).encode()


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_nesting_deeper_than_1000_levels_is_invalid_request(client: TestClient, path: str) -> None:
    create(client, id="s", seed=turn(1))

    assert_invalid_request(_post(client, path, _nested_event_body(1001)), "")
    assert_invalid_request(_post(client, path, b"[" * 100_000 + b"]" * 100_000), "")


def test_the_history_serves_the_deepest_message_the_log_takes(client: TestClient) -> None:
    def deep_message(depth: int) -> dict[str, Any]:
        message = user_message("deep")
        message["data"]["content"][0]["extra"] = nested_list(depth)
        return message

    low, high = 1, 1000  # the deepest message stored is found by bisection, whatever the storage's limit
    while low < high:
        depth = (low + high + 1) // 2
        create(client, id=f"probe-{depth}")
        stored = client.post(f"/sessions/probe-{depth}/events", json={"events": [deep_message(depth)]})
        if stored.status_code == 201:
            low = depth
        else:
            assert stored.status_code == 422, stored.text
            high = depth - 1
    create(client, id="deepest")
    event = append(client, "deepest", [deep_message(low)])["events"][0]

    assert history_of(client, "deepest") == [event["data"]]


# -- path ids ---------------------------------------------------------------------------------------------------------

BAD_IDS = [
    pytest.param("a%2Fb", id="encoded-slash"),
    pytest.param("a%2fb", id="encoded-slash-lowercase"),
    pytest.param("%2E%2E", id="dot-dot"),
    pytest.param("%2E", id="dot"),
    pytest.param(".hidden", id="leading-dot"),
    pytest.param("-dash", id="leading-dash"),
    pytest.param("a" * 129, id="129-characters"),
    pytest.param("%C3%A9t%C3%A9", id="unicode"),
    pytest.param("a%20b", id="space"),
    pytest.param("a%00b", id="nul"),
    pytest.param("a:b", id="colon"),
]


@pytest.mark.parametrize("session_id", BAD_IDS)
@pytest.mark.parametrize(
    ("method", "suffix"),
    [
        ("GET", ""),
        ("DELETE", ""),
        ("POST", "/events"),
        ("GET", "/events"),
        ("GET", "/history"),
        ("POST", "/snapshot"),
        ("POST", "/fork"),
    ],
)
def test_a_malformed_path_id_is_invalid_request(client: TestClient, method: str, suffix: str, session_id: str) -> None:
    body = {"events": [note("a")]} if suffix == "/events" and method == "POST" else None

    assert_invalid_request(client.request(method, f"/sessions/{session_id}{suffix}", json=body), "id")


def test_a_problem_names_the_path_decoded_once(make_app: AppFactory) -> None:
    # Through a transport that decodes the path once, as a server does (the TestClient decodes it twice).
    async def main() -> list[Any]:
        async with serve(make_app()) as client:
            return [await client.get(path) for path in ("/sessions/a%2Fb%2541/events", "/sessions/a%2541")]

    encoded_slash, percent = asyncio.run(main())

    assert_invalid_request(encoded_slash, "id", instance="/sessions/a/b%41/events")
    assert_invalid_request(percent, "id", instance="/sessions/a%41")


def test_an_encoded_slash_outside_the_id_names_no_route(make_app: AppFactory) -> None:
    # %2F is a character of a segment, not a separator: /sessions%2Fs is not /sessions/s.
    paths = ("/sessions%2Fs", "/sessions%2Fs%2Fevents", "/sessions/s/events%2F", "/healthz%2F")

    async def main() -> list[Any]:
        async with serve(make_app()) as client:
            assert (await client.post("/sessions", json={"id": "s"})).status_code == 201
            return [await client.get(path) for path in paths]

    for response in asyncio.run(main()):
        assert_problem(response, 404, "NOT_FOUND")


def test_an_id_of_128_characters_is_an_id(client: TestClient) -> None:
    session_id = "a" * 128

    assert_problem(client.get(f"/sessions/{session_id}"), 404, "SESSION_NOT_FOUND")
    assert create(client, id=session_id)["id"] == session_id
    assert get_session(client, session_id)["id"] == session_id


# -- routes and query parameters -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/session", "/sessions/s/rewind", "/sessions/s/events/extra", "/docs/nothing"])
def test_an_unknown_route_is_not_found(client: TestClient, path: str) -> None:
    assert_problem(client.get(path), 404, "NOT_FOUND")


def test_unknown_query_parameters_are_ignored(client: TestClient) -> None:
    create(client, id="s", seed=turn(1))

    assert client.get("/sessions", params={"debug": "1", "page": "x"}).json()["items"][0]["id"] == "s"
    assert client.get("/sessions/s", params={"fields": "id"}).status_code == 200
    assert client.get("/sessions/s/events", params={"to": "-1"}).json()["nextSeq"] == 9
    assert client.get("/sessions/s/history", params={"at": "abc"}).status_code == 200
    assert client.post("/sessions/s/fork", params={"atSeq": "abc"}, json={}).json()["seedLength"] == 9
    assert client.post("/sessions", params={"id": "-bad"}, json={"id": "t"}).status_code == 201
