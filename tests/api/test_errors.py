"""Every error code of the spec's table (status, problem body, facts) and the check order of spec 2.3.

Content types, sizes and lossless JSON are in test_content_types.py.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from app.backends.errors import StorageUnavailable
from app.backends.memory import MemoryBackend
from app.domain.clock import wall_clock_ms
from tests.api.builders import as_seed, note, open_turn, turn, turn_end
from tests.api.conftest import AppFactory, ClientFactory
from tests.api.helpers import (
    append,
    assert_invalid_request,
    assert_problem,
    create,
    events_of,
    get_session,
    wait_ready,
)

BAD_EVENT = turn_end(7)  # no turn is open
Request = tuple[str, str, dict[str, Any] | None]
SESSION_ROUTES: list[Request] = [
    ("POST", "/sessions", {}),
    ("GET", "/sessions", None),
    ("GET", "/sessions/s", None),
    ("DELETE", "/sessions/s", None),
    ("POST", "/sessions/s/events", {"events": [note("a")]}),
    ("GET", "/sessions/s/events", None),
    ("GET", "/sessions/s/history", None),
    ("POST", "/sessions/s/snapshot", {}),
    ("POST", "/sessions/s/fork", {}),
]


def _send(client: TestClient, request: Request) -> Any:
    method, path, body = request
    return client.request(method, path, json=body)


# -- one test per code ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [request for request in SESSION_ROUTES if request[1] not in ("/sessions", "/sessions/s/fork")]
    + [("POST", "/sessions/s/fork", {"sessionId": "child"})],
    ids=lambda request: f"{request[0]} {request[1]}",
)
def test_session_not_found(client: TestClient, request_: Request) -> None:
    assert_problem(_send(client, request_), 404, "SESSION_NOT_FOUND")
    assert client.get("/readyz").json()["sessions"] == 0  # the fork made no child


def test_session_already_exists(client: TestClient) -> None:
    create(client, id="taken", seed=turn(1))
    create(client, id="source", seed=turn(1))

    assert_problem(client.post("/sessions", json={"id": "taken"}), 409, "SESSION_ALREADY_EXISTS")
    assert_problem(client.post("/sessions/source/fork", json={"sessionId": "taken"}), 409, "SESSION_ALREADY_EXISTS")
    assert_problem(client.post("/sessions/source/fork", json={"sessionId": "source"}), 409, "SESSION_ALREADY_EXISTS")
    assert get_session(client, "taken")["eventCount"] == 9


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/sessions/s/events", {"events": [note("a")]}),
        ("/sessions/s/snapshot", {}),
        ("/sessions/s/fork", {}),
    ],
)
def test_session_not_live(client: TestClient, path: str, body: dict[str, Any]) -> None:
    create(client, id="s", seed=turn(1))

    assert_problem(client.post(path, json={**body, "instance": "an-old-one"}), 409, "SESSION_NOT_LIVE")
    assert get_session(client, "s")["eventCount"] == 9


def test_not_at_turn_boundary(client: TestClient) -> None:
    create(client, id="s", seed=turn(1) + open_turn(2))

    assert_problem(
        client.post("/sessions/s/fork"),
        409,
        "NOT_AT_TURN_BOUNDARY",
        lastEventType="assistant/chunk",
        openTurn=2,
        lastTurnEndSeq=8,
    )


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/sessions/s/events", {"events": [note("a")]}),
        ("/sessions/s/snapshot", {}),
        ("/sessions/s/fork", {}),
    ],
)
@pytest.mark.parametrize("expected_seq", [8, 10, -1, 10**15])
def test_seq_conflict(client: TestClient, path: str, body: dict[str, Any], expected_seq: int) -> None:
    create(client, id="s", seed=turn(1))

    assert_problem(client.post(path, json={**body, "expectedSeq": expected_seq}), 409, "SEQ_CONFLICT", currentSeq=9)
    assert get_session(client, "s")["eventCount"] == 9
    assert client.get("/readyz").json()["sessions"] == 1


@pytest.mark.parametrize("operation", ["snapshot", "fork"])
def test_invalid_boundary(client: TestClient, operation: str) -> None:
    create(client, id="s", seed=turn(1))

    assert_problem(client.post(f"/sessions/s/{operation}", json={"atSeq": 4}), 422, "INVALID_BOUNDARY")


def test_invalid_seed_names_the_event_and_the_reason(client: TestClient) -> None:
    seed = [*turn(1), note("fine"), BAD_EVENT, note("fine too")]

    body = assert_problem(client.post("/sessions", json={"id": "s", "seed": seed}), 422, "INVALID_SEED", index=10)

    assert "turn/end" in body["reason"]
    assert_problem(client.get("/sessions/s"), 404, "SESSION_NOT_FOUND")


def test_invalid_seed_when_a_seq_is_not_its_index(client: TestClient) -> None:
    seed = as_seed(turn(1))
    seed[5]["seq"] = 6

    body = assert_problem(client.post("/sessions", json={"seed": seed}), 422, "INVALID_SEED", index=5)

    assert "seq" in body["reason"]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("cwd", "relative/path"),
        ("cwd", 7),
        ("parentSession", ""),
        ("seedLength", 10),
        ("seedLength", -1),
        ("seedLength", 1.5),
        ("origin", "human"),
        ("delegationDepth", -1),
        ("delegationDepth", "1"),
        ("agentPreset", 3),
        ("createdAt", -1),
        ("cwd", "/a\u0000b"),
        ("agentPreset", "coder\u0000"),
    ],
)
def test_invalid_seed_for_a_bad_meta_value(client: TestClient, key: str, value: Any) -> None:
    response = client.post("/sessions", json={"seed": turn(1), "meta": {key: value}})

    body = assert_problem(response, 422, "INVALID_SEED")
    assert key in body["reason"]
    assert client.get("/readyz").json()["sessions"] == 0


def test_invalid_event_names_the_event_and_the_reason(client: TestClient) -> None:
    create(client, id="s")

    response = client.post("/sessions/s/events", json={"events": [note("a"), BAD_EVENT]})

    body = assert_problem(response, 422, "INVALID_EVENT", index=1)
    assert "turn/end" in body["reason"]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        pytest.param("POST", "/sessions", {"meta": {"color": "red"}}, "meta.color", id="body-path"),
        pytest.param("POST", "/sessions", {"id": 5}, "id", id="body-id"),
        pytest.param("POST", "/sessions", {"id": "a/b"}, "id", id="body-id-format"),
        pytest.param("POST", "/sessions", {"seed": {"type": "x/y"}}, "seed", id="seed-not-array"),
        pytest.param("POST", "/sessions", {"meta": [1]}, "meta", id="meta-not-object"),
        pytest.param("GET", "/sessions?limit=0", None, "limit", id="query"),
        pytest.param("GET", "/sessions/-x", None, "id", id="path-id"),
        pytest.param("POST", "/sessions/-x/fork", {}, "id", id="path-id-post"),
        pytest.param("POST", "/sessions", [], "", id="whole-body"),
        pytest.param("POST", "/sessions/s/events", {"events": [], "expectedSeq": 1}, "events", id="no-events"),
        pytest.param("POST", "/sessions/s/events", {"events": [note("a")], "instance": 5}, "instance", id="instance"),
    ],
)
def test_invalid_request_names_the_field(client: TestClient, method: str, path: str, body: Any, field: str) -> None:
    create(client, id="s")

    assert_invalid_request(client.request(method, path, json=body), field)


def test_a_problem_instance_is_the_decoded_path_without_the_query(client: TestClient) -> None:
    assert_problem(client.get("/sessions/missing?x=1&y=2"), 404, "SESSION_NOT_FOUND", instance="/sessions/missing")
    assert_problem(client.get("/sessions/a%3Fb"), 422, "INVALID_REQUEST", instance="/sessions/a?b")
    assert_problem(client.get("/sessions/a%23b/events"), 422, "INVALID_REQUEST", instance="/sessions/a#b/events")
    assert_problem(client.get("/sessions/%C3%A9t%C3%A9"), 422, "INVALID_REQUEST", instance="/sessions/été")


def test_not_found(client: TestClient) -> None:
    assert_problem(client.get("/nowhere"), 404, "NOT_FOUND")
    assert_problem(client.post("/sessions/s/rewind", json={}), 404, "NOT_FOUND")
    assert_problem(client.get("/sessions/s/events/0"), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/sessions", {"GET", "POST"}),
        ("PUT", "/sessions/s", {"GET", "PATCH", "DELETE"}),
        ("DELETE", "/sessions/s/events", {"GET", "POST"}),
        ("GET", "/sessions/s/fork", {"POST"}),
        ("POST", "/healthz", {"GET"}),
    ],
)
def test_method_not_allowed_lists_the_allowed_methods(
    client: TestClient, method: str, path: str, allowed: set[str]
) -> None:
    response = client.request(method, path)

    assert_problem(response, 405, "METHOD_NOT_ALLOWED")
    assert {item.strip() for item in response.headers["allow"].split(",")} == allowed


def test_payload_too_large(make_client: ClientFactory) -> None:
    client = make_client(max_body_bytes=2048)
    create(client, id="s")

    response = client.post("/sessions/s/events", json={"events": [note("x" * 3000)]})

    assert_problem(response, 413, "PAYLOAD_TOO_LARGE")
    assert get_session(client, "s")["eventCount"] == 0


def test_unsupported_media_type(client: TestClient) -> None:
    create(client, id="s")

    response = client.post("/sessions/s/events", content=b'{"events": []}', headers={"content-type": "text/plain"})

    assert_problem(response, 415, "UNSUPPORTED_MEDIA_TYPE")


# -- NOT_READY ------------------------------------------------------------------------------------------------------


class SlowRecovery(MemoryBackend):
    """A store whose opening (its recovery) waits until the test releases it."""

    def __init__(self) -> None:
        super().__init__(clock=wall_clock_ms)
        self.release = threading.Event()

    async def open(self) -> None:
        assert await asyncio.to_thread(self.release.wait, 30), "the test never released the recovery"


@pytest.fixture
def slow_recovery() -> Iterator[SlowRecovery]:
    journal = SlowRecovery()
    yield journal
    journal.release.set()  # never leave the recovery thread blocked


@pytest.mark.files_only
def test_not_ready_while_recovering(
    make_app: AppFactory, make_client: ClientFactory, slow_recovery: SlowRecovery
) -> None:
    client = make_client(make_app(backend=slow_recovery), ready=False)

    for request in SESSION_ROUTES:
        assert_problem(_send(client, request), 503, "NOT_READY")
    assert client.get("/healthz").json() == {"status": "ok"}
    assert_problem(client.get("/readyz"), 503, "NOT_READY")

    slow_recovery.release.set()
    wait_ready(client)

    create(client, id="s", seed=turn(1))
    assert client.get("/sessions").status_code == 200
    assert client.get("/sessions/s").status_code == 200
    assert client.get("/sessions/s/events").status_code == 200
    assert client.get("/sessions/s/history").status_code == 200
    assert client.post("/sessions/s/snapshot").status_code == 200
    assert client.post("/sessions/s/fork").status_code == 201
    assert client.post("/sessions/s/events", json={"events": [note("a")]}).status_code == 201
    assert client.delete("/sessions/s").status_code == 204


@pytest.mark.files_only
@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/sessions", {"meta": {"color": 1}}, "meta.color"),
        ("POST", "/sessions", "[", ""),
        ("GET", "/sessions?limit=0", None, "limit"),
        ("GET", "/sessions?cursor=not-a-cursor", None, "cursor"),
        ("GET", "/sessions?parent=-x", None, "parent"),
        ("GET", "/sessions/-x", None, "id"),
        ("DELETE", "/sessions/%2E%2E", None, "id"),
        ("POST", "/sessions/s/events", {"events": []}, "events"),
        ("GET", "/sessions/s/events?from=-1", None, "from"),
        ("GET", "/sessions/s/history?atSeq=abc", None, "atSeq"),
        ("POST", "/sessions/s/snapshot", {"atSeq": "1"}, "atSeq"),
        ("POST", "/sessions/s/fork", {"sessionId": 5}, "sessionId"),
    ],
)
def test_a_malformed_request_is_refused_before_readiness(
    make_app: AppFactory,
    make_client: ClientFactory,
    slow_recovery: SlowRecovery,
    method: str,
    path: str,
    body: Any,
    field: str,
) -> None:
    client = make_client(make_app(backend=slow_recovery), ready=False)
    content = body.encode() if isinstance(body, str) else None
    json_body = None if isinstance(body, str) else body

    response = client.request(method, path, json=json_body, content=content)

    assert_invalid_request(response, field)


# -- STORAGE_UNAVAILABLE ----------------------------------------------------------------------------------------------


class RefusingDisk(MemoryBackend):
    """A store that refuses every change while ``full`` is set."""

    def __init__(self) -> None:
        super().__init__(clock=wall_clock_ms)
        self.full = False

    def _check(self) -> None:
        if self.full:
            raise StorageUnavailable("the disk is full")

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return await super().create(*args, **kwargs)

    async def append(self, *args: Any, **kwargs: Any) -> None:
        self._check()
        await super().append(*args, **kwargs)

    async def delete(self, *args: Any, **kwargs: Any) -> None:
        self._check()
        await super().delete(*args, **kwargs)


@pytest.mark.files_only
def test_storage_unavailable_acknowledges_nothing(make_app: AppFactory, make_client: ClientFactory) -> None:
    disk = RefusingDisk()
    client = make_client(make_app(backend=disk))
    create(client, id="s", seed=turn(1))
    before = events_of(client, "s")
    disk.full = True

    assert_problem(client.post("/sessions/s/events", json={"events": [note("a")]}), 503, "STORAGE_UNAVAILABLE")
    assert_problem(client.post("/sessions", json={"id": "new"}), 503, "STORAGE_UNAVAILABLE")
    assert_problem(client.post("/sessions/s/fork", json={"sessionId": "child"}), 503, "STORAGE_UNAVAILABLE")
    assert_problem(client.post("/sessions/s/fork"), 503, "STORAGE_UNAVAILABLE")
    assert_problem(client.delete("/sessions/s"), 503, "STORAGE_UNAVAILABLE")

    assert events_of(client, "s") == before
    assert [item["id"] for item in client.get("/sessions").json()["items"]] == ["s"]
    assert_problem(client.get("/sessions/new"), 404, "SESSION_NOT_FOUND")

    disk.full = False  # a retry succeeds, with the ids the failed calls named
    assert append(client, "s", [note("a")])["events"][0]["seq"] == 9
    assert create(client, id="new")["id"] == "new"
    assert client.post("/sessions/s/fork", json={"sessionId": "child", "atSeq": 8}).status_code == 201
    assert client.delete("/sessions/s").status_code == 204


# -- SESSION_CORRUPT --------------------------------------------------------------------------------------------------

HEADER = b'{"type":"session","version":0,"id":"%s","createdAt":1700000000000}\n'
TURN_END = b'{"type":"turn/end","seq":1,"time":1700000000002,"data":{"turn":1,"reason":{"kind":"completed"}}}\n'


@pytest.fixture
def damaged(data_dir: Path) -> Path:
    """A data directory holding a damaged log ``bad``, a stray file, and a header-only log ``good``."""
    sessions = data_dir / "sessions"
    sessions.mkdir(parents=True)
    path = sessions / "bad.jsonl"
    path.write_bytes(HEADER % b"bad" + b'{"type":"turn/start","seq":0,"time":1700000000001,"data":{"turn\n' + TURN_END)
    (sessions / "good.jsonl").write_bytes(HEADER % b"good")
    (sessions / "-stray.jsonl").write_bytes(HEADER % b"-stray")
    return path


@pytest.mark.files_only
def test_readyz_lists_a_corrupt_session(make_client: ClientFactory, damaged: Path) -> None:
    content = damaged.read_bytes()
    client = make_client()

    ready = client.get("/readyz").json()

    assert (ready["status"], ready["sessions"]) == ("ready", 1)
    corrupt = {item["id"]: item for item in ready["corrupt"]}
    assert set(corrupt) == {"bad", "-stray"}
    assert set(corrupt["bad"]) == {"id", "tenant", "path", "reason"}
    assert Path(corrupt["bad"]["path"]) == damaged.absolute()
    assert "line 2" in corrupt["bad"]["reason"]
    assert [item["id"] for item in client.get("/sessions").json()["items"]] == ["good"]
    assert damaged.read_bytes() == content  # left untouched for an operator


@pytest.mark.files_only
@pytest.mark.parametrize(
    "request_",
    [
        ("GET", "/sessions/bad", None),
        ("DELETE", "/sessions/bad", None),
        ("POST", "/sessions/bad/events", {"events": [note("a")]}),
        ("GET", "/sessions/bad/events", None),
        ("GET", "/sessions/bad/history", None),
        ("POST", "/sessions/bad/snapshot", {}),
        ("POST", "/sessions/bad/fork", {}),
        ("POST", "/sessions/good/fork", {"sessionId": "bad"}),
        ("POST", "/sessions/missing/fork", {"sessionId": "bad"}),  # the child id is checked first
        ("POST", "/sessions", {"id": "bad"}),
        ("POST", "/sessions", {"id": "bad", "seed": [BAD_EVENT]}),
    ],
    ids=lambda request: f"{request[0]} {request[1]} {request[2]}",
)
def test_session_corrupt(make_client: ClientFactory, damaged: Path, request_: Request) -> None:
    client = make_client()

    assert_problem(_send(client, request_), 503, "SESSION_CORRUPT")
    assert get_session(client, "good")["eventCount"] == 0  # every other session serves
    assert client.get("/readyz").json()["sessions"] == 1


@pytest.mark.files_only
def test_a_corrupt_source_comes_after_a_taken_child_id(make_client: ClientFactory, damaged: Path) -> None:
    client = make_client()

    response = client.post("/sessions/bad/fork", json={"sessionId": "good"})

    assert_problem(response, 409, "SESSION_ALREADY_EXISTS")


# -- INTERNAL ---------------------------------------------------------------------------------------------------------


class BrokenBackend(MemoryBackend):
    """A store with a bug: not an input the service refuses, an error it did not foresee."""

    def __init__(self) -> None:
        super().__init__(clock=wall_clock_ms)

    async def append(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("secret internal detail")


@pytest.mark.files_only
def test_internal_is_a_problem_that_tells_nothing_of_the_bug(make_app: AppFactory, make_client: ClientFactory) -> None:
    client = make_client(make_app(backend=BrokenBackend()), raise_server_exceptions=False)
    create(client, id="s")

    response = client.post("/sessions/s/events", json={"events": [note("a")]})

    body = assert_problem(response, 500, "INTERNAL")
    assert "secret" not in response.text
    assert body["detail"]
    assert get_session(client, "s")["eventCount"] == 0


# -- check order (spec 2.3) -------------------------------------------------------------------------------------------

BREAK_IN_EVENT = b'{"type": "x/y", "data": {"a": 1, "a": 2}}'


@pytest.fixture
def order_client(client: TestClient) -> TestClient:
    """``open``: a turn completed, the next one open; ``done``: one completed turn; ``fresh``: empty."""
    create(client, id="open", seed=turn(1) + open_turn(2))
    create(client, id="done", seed=turn(1))
    create(client, id="fresh")
    return client


CHECK_ORDER: list[Any] = [
    # create: syntax, then readiness, then the id, then the meta and the seed
    pytest.param("POST", "/sessions", {"id": "done", "meta": {"color": 1}}, "INVALID_REQUEST", id="create-syntax"),
    pytest.param("POST", "/sessions", {"id": "done", "seed": [BAD_EVENT]}, "SESSION_ALREADY_EXISTS", id="create-id"),
    pytest.param(
        "POST", "/sessions", {"id": "done", "meta": {"cwd": "x"}}, "SESSION_ALREADY_EXISTS", id="create-id-meta"
    ),
    pytest.param("POST", "/sessions", {"meta": {"cwd": "x"}, "seed": [BAD_EVENT]}, "INVALID_SEED", id="create-meta"),
    # append: syntax, not found, not live, seq, event
    pytest.param(
        "POST",
        "/sessions/missing/events",
        {"events": [BAD_EVENT], "expectedSeq": "3"},
        "INVALID_REQUEST",
        id="append-syntax",
    ),
    pytest.param(
        "POST",
        "/sessions/missing/events",
        {"events": [BAD_EVENT], "instance": "x", "expectedSeq": 0},
        "SESSION_NOT_FOUND",
        id="append-not-found",
    ),
    pytest.param(
        "POST",
        "/sessions/done/events",
        {"events": [BAD_EVENT], "instance": "x", "expectedSeq": 0},
        "SESSION_NOT_LIVE",
        id="append-not-live",
    ),
    pytest.param(
        "POST", "/sessions/done/events", {"events": [BAD_EVENT], "expectedSeq": 0}, "SEQ_CONFLICT", id="append-seq"
    ),
    pytest.param(
        "POST",
        "/sessions/done/events",
        {"events": [BAD_EVENT], "expectedSeq": -1},
        "SEQ_CONFLICT",
        id="append-negative-seq",
    ),
    pytest.param(
        "POST", "/sessions/done/events", {"events": [BAD_EVENT], "expectedSeq": 9}, "INVALID_EVENT", id="append-event"
    ),
    # snapshot: syntax, not found, not live, seq, boundary
    pytest.param("POST", "/sessions/missing/snapshot", {"atSeq": 1.5}, "INVALID_REQUEST", id="snapshot-syntax"),
    pytest.param("POST", "/sessions/missing/snapshot", {"instance": "x"}, "SESSION_NOT_FOUND", id="snapshot-not-found"),
    pytest.param(
        "POST",
        "/sessions/open/snapshot",
        {"instance": "x", "expectedSeq": 0, "atSeq": 3},
        "SESSION_NOT_LIVE",
        id="snapshot-not-live",
    ),
    pytest.param("POST", "/sessions/open/snapshot", {"expectedSeq": 0, "atSeq": 3}, "SEQ_CONFLICT", id="snapshot-seq"),
    pytest.param("POST", "/sessions/open/snapshot", {"expectedSeq": -1}, "SEQ_CONFLICT", id="snapshot-negative-seq"),
    pytest.param("POST", "/sessions/open/snapshot", {"expectedSeq": 13}, "NOT_AT_TURN_BOUNDARY", id="snapshot-open"),
    # fork: syntax, child id, not found, not live, seq, boundary
    pytest.param("POST", "/sessions/missing/fork", {"sessionId": "-x"}, "INVALID_REQUEST", id="fork-syntax"),
    pytest.param(
        "POST", "/sessions/missing/fork", {"sessionId": "done"}, "SESSION_ALREADY_EXISTS", id="fork-child-first"
    ),
    pytest.param(
        "POST",
        "/sessions/open/fork",
        {"sessionId": "fresh", "instance": "x"},
        "SESSION_ALREADY_EXISTS",
        id="fork-child-before-instance",
    ),
    pytest.param(
        "POST", "/sessions/missing/fork", {"sessionId": "new", "instance": "x"}, "SESSION_NOT_FOUND", id="fork-missing"
    ),
    pytest.param(
        "POST",
        "/sessions/open/fork",
        {"instance": "x", "expectedSeq": 0, "atSeq": 3},
        "SESSION_NOT_LIVE",
        id="fork-not-live",
    ),
    pytest.param("POST", "/sessions/open/fork", {"expectedSeq": 0}, "SEQ_CONFLICT", id="fork-seq"),
    pytest.param("POST", "/sessions/open/fork", {"expectedSeq": -5, "atSeq": 3}, "SEQ_CONFLICT", id="fork-neg-seq"),
    pytest.param("POST", "/sessions/open/fork", {"expectedSeq": 13, "atSeq": 3}, "INVALID_BOUNDARY", id="fork-at"),
]


@pytest.mark.parametrize(("method", "path", "body", "code"), CHECK_ORDER)
def test_check_order(order_client: TestClient, method: str, path: str, body: Any, code: str) -> None:
    before = order_client.get("/sessions").json()

    response = order_client.request(method, path, json=body)

    assert response.json()["code"] == code, response.text
    assert order_client.get("/sessions").json() == before  # a refusal changes nothing


@pytest.mark.parametrize(
    ("path", "code"),
    [
        ("/sessions/missing/events", "SESSION_NOT_FOUND"),
        ("/sessions/done/events", "INVALID_EVENT"),
    ],
)
def test_a_lossless_break_in_an_event_is_checked_with_the_events(
    order_client: TestClient, path: str, code: str
) -> None:
    response = order_client.post(
        path, content=b'{"events": [' + BREAK_IN_EVENT + b"]}", headers={"content-type": "application/json"}
    )

    assert response.json()["code"] == code


# -- body members -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/sessions", {"id": "x", "color": 1}, "color"),
        ("/sessions", {"seed": [], "sessionId": "x"}, "sessionId"),
        ("/sessions/done/events", {"events": [note("a")], "atSeq": 8}, "atSeq"),
        ("/sessions/done/snapshot", {"sessionId": "x"}, "sessionId"),
        ("/sessions/done/fork", {"source": "done"}, "source"),
        ("/sessions/done/fork", {"session_id": "x"}, "session_id"),
    ],
)
def test_an_unknown_body_member_is_refused(order_client: TestClient, path: str, body: Any, field: str) -> None:
    assert_invalid_request(order_client.post(path, json=body), field)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/sessions/done/events", {"events": [note("a")]}),
        ("/sessions/done/snapshot", {}),
        ("/sessions/done/fork", {}),
    ],
)
@pytest.mark.parametrize("expected_seq", [9.5, "9", True, [9], {}])
def test_expected_seq_must_be_an_integral_number(
    order_client: TestClient, path: str, body: Any, expected_seq: Any
) -> None:
    assert_invalid_request(order_client.post(path, json={**body, "expectedSeq": expected_seq}), "expectedSeq")


@pytest.mark.parametrize("path", ["/sessions/done/events", "/sessions/done/snapshot", "/sessions/done/fork"])
@pytest.mark.parametrize("instance", [5, True, ["x"]])
def test_instance_must_be_a_string(order_client: TestClient, path: str, instance: Any) -> None:
    body = {"events": [note("a")]} if path.endswith("events") else {}

    assert_invalid_request(order_client.post(path, json={**body, "instance": instance}), "instance")


@pytest.mark.parametrize(
    "path", ["/sessions", "/sessions/done/events", "/sessions/done/snapshot", "/sessions/done/fork"]
)
@pytest.mark.parametrize("body", [b"[]", b'"x"', b"1", b"null", b"true"])
def test_the_body_must_be_an_object(order_client: TestClient, path: str, body: bytes) -> None:
    response = order_client.post(path, content=body, headers={"content-type": "application/json"})

    assert_invalid_request(response, "")
