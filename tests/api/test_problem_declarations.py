"""Every problem an operation answers is declared for it, with its status, and nothing else is (spec 5.1).

Each operation's error cases run through the ASGI app, on stores in every state that matters (serving, still
recovering, refusing, buggy, moving under an append, busy with a first request); every answer's (status, code)
is collected for its operation and its body checked against the schema the document declares for that status.
Then the collected set must be exactly the declared one, less what the app alone cannot answer here:
:data:`ANSWERED_ELSEWHERE`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.docs.openapi_document import document
from app.api.settings import Settings
from app.backends.base import Backend
from app.backends.errors import StaleHead, StorageUnavailable
from app.backends.memory import MemoryBackend
from app.domain.clock import wall_clock_ms
from tests.api.builders import note, open_turn, turn, turn_end
from tests.api.conftest import LOCAL
from tests.api.helpers import PROBLEM_JSON, Response, wait_ready

DOCUMENT = document()
SCHEMAS = "#/components/schemas/"

# operationId -> (method, path with {id}, a body the operation takes)
OPERATIONS: dict[str, tuple[str, str, Any]] = {
    "create_session": ("POST", "/sessions", {}),
    "list_sessions": ("GET", "/sessions", None),
    "get_session": ("GET", "/sessions/{id}", None),
    "delete_session": ("DELETE", "/sessions/{id}", None),
    "append_events": ("POST", "/sessions/{id}/events", {"events": [note("a")]}),
    "read_events": ("GET", "/sessions/{id}/events", None),
    "stream_events": ("GET", "/sessions/{id}/events/stream", None),
    "read_log": ("GET", "/sessions/{id}/log", None),
    "read_lineage": ("GET", "/sessions/{id}/lineage", None),
    "read_history": ("GET", "/sessions/{id}/history", None),
    "snapshot_session": ("POST", "/sessions/{id}/snapshot", {}),
    "fork_session": ("POST", "/sessions/{id}/fork", {}),
    "healthz": ("GET", "/healthz", None),
    "readyz": ("GET", "/readyz", None),
    "metrics": ("GET", "/metrics", None),
}
PUBLIC = {"healthz", "readyz"}
CHANGES = {"create_session", "delete_session", "append_events", "fork_session"}
IDEMPOTENT = ("create_session", "append_events", "fork_session")

# Declared, but not answered by the app on its own: the HTTP server answers 408 (headers that stop arriving) and
# 431 before any route runs (tests/e2e/test_limits.py), a key check answers 401 and 403 with a keys file (the
# access-control tests) and 429 RATE_LIMITED for a key with a rate limit (tests/api/test_rate_limits.py), and
# /healthz has no code that could fail (its 500 is any bug's).
ANSWERED_ELSEWHERE = {
    (401, "UNAUTHENTICATED"),
    (403, "FORBIDDEN"),
    (408, "REQUEST_TIMEOUT"),
    (431, "HEADERS_TOO_LARGE"),
    (429, "RATE_LIMITED"),  # a key over its rate limit (tests/api/test_rate_limits.py)
}
ANSWERED_ELSEWHERE_BY_OPERATION = {"healthz": {(500, "INTERNAL")}, "metrics": {(500, "INTERNAL")}}
# Operations that answer whatever state the store is in (the metrics keep the last count of a store that fails).
STORELESS = {"healthz", "metrics"}

Request = tuple[str, str, dict[str, Any]]  # method, path, httpx keyword arguments
# Two valid bodies of each idempotent operation, for a key's first request and for a reuse with another body.
KEYED_BODIES: dict[str, tuple[Any, Any]] = {
    "create_session": ({"id": "k1"}, {"id": "k2"}),
    "append_events": ({"events": [note("a")]}, {"events": [note("b")]}),
    "fork_session": ({"sessionId": "k3", "atSeq": 8}, {"sessionId": "k4", "atSeq": 8}),
}


def declared(operation_id: str) -> dict[tuple[int, str], str]:
    """(status, code) -> the schema reference the document declares for that status."""
    method, path, _ = OPERATIONS[operation_id]
    responses = DOCUMENT["paths"][path][method.lower()]["responses"]
    found: dict[tuple[int, str], str] = {}
    for status, response in responses.items():
        if int(status) < 400:
            continue
        reference = response["content"][PROBLEM_JSON]["schema"]["$ref"]
        schema = DOCUMENT["components"]["schemas"][reference.removeprefix(SCHEMAS)]
        members = [member["$ref"] for member in schema.get("oneOf", [])] or [reference]
        for member in members:
            code = DOCUMENT["components"]["schemas"][member.removeprefix(SCHEMAS)]["properties"]["code"]["const"]
            found[(int(status), code)] = reference
    return found


def schema_validator(reference: str) -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator({"$ref": reference, "components": DOCUMENT["components"]})


@dataclass
class Answers:
    """What each operation answered: its (status, code) pairs, and every body that broke its declared schema."""

    codes: dict[str, set[tuple[int, str]]] = field(default_factory=lambda: {name: set() for name in OPERATIONS})
    misfits: list[str] = field(default_factory=list)

    def note(self, operation_id: str, response: Response) -> None:
        assert response.status_code >= 400, f"{operation_id}: a case succeeded ({response.status_code})"
        assert response.headers["content-type"] == PROBLEM_JSON, response.text
        body = response.json()
        answer = (response.status_code, body["code"])
        self.codes[operation_id].add(answer)
        reference = declared(operation_id).get(answer)
        if reference is not None and not schema_validator(reference).is_valid(body):
            errors = "; ".join(str(error) for error in schema_validator(reference).iter_errors(body))
            self.misfits.append(f"{operation_id} {answer}: {json.dumps(body)}: {errors}")


# -- stores in the states that matter ---------------------------------------------------------------------------------


class NeverReady(MemoryBackend):
    """A store still recovering when the app shuts down (which cancels the recovery)."""

    async def open(self) -> None:
        await asyncio.Event().wait()


class Failing(MemoryBackend):
    """A store whose every read and change raises ``error()``: a refusing disk or database, or a bug."""

    def __init__(self, error: Callable[[], Exception]) -> None:
        super().__init__(clock=wall_clock_ms)
        self.error = error

    async def find(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error()

    async def page(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error()

    async def readiness(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error()

    async def tip(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error()


class MovingHead(MemoryBackend):
    """A shared store where another process always appends first: every append finds its head moved."""

    async def append(self, *args: Any, **kwargs: Any) -> None:
        raise StaleHead("another process appended meanwhile")


class SlowChanges(MemoryBackend):
    """Creates and appends wait for ``release``: a first request with an Idempotency-Key is still running."""

    def __init__(self) -> None:
        super().__init__(clock=wall_clock_ms)
        self.release = asyncio.Event()

    async def create(self, *args: Any, **kwargs: Any) -> Any:
        await self.release.wait()
        return await super().create(*args, **kwargs)

    async def append(self, *args: Any, **kwargs: Any) -> None:
        await self.release.wait()
        await super().append(*args, **kwargs)


HEADER = b'{"type":"session","version":0,"id":"%s","createdAt":1700000000000}\n'


def damage(data_dir: Path) -> None:
    """A data directory whose session ``bad`` has a damaged log."""
    sessions = data_dir / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "bad.jsonl").write_bytes(HEADER % b"bad" + b'{"type":"turn/start","seq":0,"time":1,"data":{"tu\n')


def _path(operation_id: str, session_id: str = "s") -> str:
    return OPERATIONS[operation_id][1].replace("{id}", session_id)


def _plain(operation_id: str, session_id: str = "s", **kwargs: Any) -> Request:
    method, _, body = OPERATIONS[operation_id]
    if body is not None and "content" not in kwargs:
        kwargs.setdefault("json", body)
    return method, _path(operation_id, session_id), kwargs


def _send(client: TestClient, request: Request) -> Response:
    method, path, kwargs = request
    return client.request(method, path, **kwargs)


# -- the cases --------------------------------------------------------------------------------------------------------


def serving_cases() -> Iterator[tuple[str, Request]]:
    """Error cases on a serving store holding ``s`` (one whole turn), ``open`` (inside a turn), ``bad`` (damaged)."""
    for operation_id, (_, template, body) in OPERATIONS.items():
        yield operation_id, _plain(operation_id, headers={"Host": "evil.example"})
        if "{id}" in template:
            yield operation_id, _plain(operation_id, "-x")
            yield operation_id, _plain(operation_id, "missing")
            yield operation_id, _plain(operation_id, "bad")
        if body is not None:
            yield operation_id, _plain(operation_id, content=b"x", headers={"Content-Type": "text/plain"})
            yield operation_id, _plain(operation_id, content=b"{" + b" " * 8192 + b"}")
            yield operation_id, _plain(operation_id, content=b"[")
        if operation_id in CHANGES:
            yield operation_id, _plain(operation_id, headers={"Origin": "https://evil.example"})
        if operation_id in IDEMPOTENT:
            yield operation_id, _plain(operation_id, headers={"Idempotency-Key": "with space"})
            used_key = {"Idempotency-Key": f"used-{operation_id}"}  # its first request had another body
            yield operation_id, _plain(operation_id, json=KEYED_BODIES[operation_id][1], headers=used_key)
    stale, boundary, bad_event = {"instance": "not-it"}, {"atSeq": 0}, turn_end(7)
    yield "list_sessions", ("GET", "/sessions", {"params": {"limit": 0}})
    yield "create_session", ("POST", "/sessions", {"json": {"id": "s"}})
    yield "create_session", ("POST", "/sessions", {"json": {"id": "bad"}})
    yield "create_session", ("POST", "/sessions", {"json": {"seed": [bad_event]}})
    yield "create_session", ("POST", "/sessions", {"json": {"meta": {"cwd": "relative"}}})
    yield "append_events", ("POST", "/sessions/s/events", {"json": {"events": [note("a")], **stale}})
    yield "append_events", ("POST", "/sessions/s/events", {"json": {"events": [note("a")], "expectedSeq": 0}})
    yield "append_events", ("POST", "/sessions/s/events", {"json": {"events": [bad_event]}})
    yield "read_events", ("GET", "/sessions/s/events", {"params": {"from": -1}})
    yield "stream_events", ("GET", "/sessions/s/events/stream", {"params": {"instance": "not-it"}})
    yield "stream_events", ("GET", "/sessions/s/events/stream", {"params": {"from": 99}})
    yield "read_history", ("GET", "/sessions/s/history", {"params": {"atSeq": 0}})
    yield "read_history", ("GET", "/sessions/s/history", {"params": {"atSeq": "x"}})
    for operation_id in ("snapshot_session", "fork_session"):
        path = _path(operation_id)
        yield operation_id, ("POST", path, {"json": stale})
        yield operation_id, ("POST", path, {"json": {"expectedSeq": 0}})
        yield operation_id, ("POST", path, {"json": boundary})
        yield operation_id, ("POST", _path(operation_id, "open"), {"json": {}})
    yield "fork_session", ("POST", "/sessions/s/fork", {"json": {"sessionId": "open"}})
    yield "fork_session", ("POST", "/sessions/s/fork", {"json": {"sessionId": "bad"}})
    yield "fork_session", ("POST", "/sessions/s/fork", {"json": {"atSeq": 8, "events": [bad_event]}})


def quota_cases() -> Iterator[tuple[str, Request]]:
    """Changes beyond a tenant's quotas (spec 14), on a store holding ``s`` with one session and 1000 bytes allowed."""
    yield "create_session", ("POST", "/sessions", {"json": {"id": "t"}})
    yield "fork_session", ("POST", "/sessions/s/fork", {"json": {}})
    yield "append_events", ("POST", "/sessions/s/events", {"json": {"events": [note("x" * 1000)]}})


def plain_cases(*, store: bool = True) -> Iterator[tuple[str, Request]]:
    """Each operation's plain request (on ``s``); only those that ask the store with ``store``."""
    for operation_id in OPERATIONS:
        if store and operation_id in STORELESS:
            continue
        yield operation_id, _plain(operation_id)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Answers:
    collected = Answers()

    def app(backend: Backend | None = None, **settings: Any) -> FastAPI:
        data_dir = tmp_path_factory.mktemp("data")
        damage(data_dir)
        return create_app(Settings(data_dir=data_dir, fsync=False, **settings), backend=backend)

    def run(client: TestClient, cases: Iterator[tuple[str, Request]]) -> None:
        for operation_id, request in cases:
            collected.note(operation_id, _send(client, request))

    with TestClient(app(max_body_bytes=4096), base_url=LOCAL) as client:
        wait_ready(client)
        for name, events in (("s", turn(1)), ("open", open_turn(1))):
            assert client.post("/sessions", json={"id": name, "seed": events}).status_code == 201
        for operation_id in IDEMPOTENT:  # a key's first request
            first = client.request(
                OPERATIONS[operation_id][0],
                _path(operation_id),
                json=KEYED_BODIES[operation_id][0],
                headers={"Idempotency-Key": f"used-{operation_id}"},
            )
            assert first.status_code == 201, first.text
        run(client, serving_cases())

    with TestClient(app(backend=NeverReady(clock=wall_clock_ms)), base_url=LOCAL) as client:
        run(client, plain_cases())

    with TestClient(app(metrics=False), base_url=LOCAL) as client:
        run(client, iter([("metrics", _plain("metrics"))]))  # metrics off: no such route

    for error in (lambda: StorageUnavailable("the disk refused"), lambda: RuntimeError("a bug")):
        failing = app(backend=Failing(error))
        with TestClient(failing, base_url=LOCAL, raise_server_exceptions=False) as client:
            deadline = time.monotonic() + 10  # /readyz cannot tell: it asks the failing store
            while not failing.state.service.ready:
                assert time.monotonic() < deadline, "the store never opened"
                time.sleep(0.005)
            run(client, plain_cases())

    with TestClient(app(max_sessions=1, max_bytes=1000), base_url=LOCAL) as client:  # a tenant at its quotas
        wait_ready(client)
        assert client.post("/sessions", json={"id": "s"}).status_code == 201
        run(client, quota_cases())

    with TestClient(app(backend=MovingHead(clock=wall_clock_ms)), base_url=LOCAL) as client:
        wait_ready(client)
        assert client.post("/sessions", json={"id": "s"}).status_code == 201
        run(client, iter([("append_events", _plain("append_events"))]))

    asyncio.run(_in_progress(app(backend=SlowChanges()), collected))
    return collected


async def _in_progress(app: FastAPI, collected: Answers) -> None:
    """A retry while the first request with its key still runs: IDEMPOTENCY_KEY_IN_PROGRESS."""
    backend = app.state.service.backend
    assert isinstance(backend, SlowChanges)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL) as client:
            while (await client.get("/readyz")).status_code != 200:
                await asyncio.sleep(0.005)
            backend.release.set()
            assert (await client.post("/sessions", json={"id": "s", "seed": turn(1)})).status_code == 201
            backend.release.clear()
            for operation_id in IDEMPOTENT:
                method = OPERATIONS[operation_id][0]
                key = {"Idempotency-Key": f"slow-{operation_id}"}
                request = {"json": KEYED_BODIES[operation_id][0]}
                first = asyncio.ensure_future(client.request(method, _path(operation_id), headers=key, **request))
                await asyncio.sleep(0.05)
                collected.note(operation_id, await client.request(method, _path(operation_id), headers=key, **request))
                backend.release.set()
                assert (await first).status_code == 201
                backend.release.clear()


@pytest.mark.parametrize("operation_id", OPERATIONS)
def test_every_answered_problem_is_declared_and_every_declared_one_answered(
    answers: Answers, operation_id: str
) -> None:
    answered = answers.codes[operation_id]
    promised = set(declared(operation_id))
    elsewhere = ANSWERED_ELSEWHERE | ANSWERED_ELSEWHERE_BY_OPERATION.get(operation_id, set())
    if operation_id in CHANGES:
        elsewhere -= {(403, "FORBIDDEN")}  # answered here: the loopback guard's cross-site refusal

    assert answered - promised == set(), "answered but not declared"
    assert promised - answered - elsewhere == set(), "declared but never answered"


def test_every_problem_body_fits_the_schema_declared_for_its_status(answers: Answers) -> None:
    assert answers.misfits == []
