"""The file backend's idempotency records: written before their change, so that no change is ever durable without
its key, and reconciled at start, so that no key outlives a change that was never made, while the key of a change
made and deleted since is kept for its 24 hours."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.files import FileBackend
from app.domain.clock import wall_clock_ms
from app.domain.session import DEFAULT_TENANT
from tests.backends.files.faulty_ops import FaultyFileOps

KEY = {"Idempotency-Key": "k-1"}


def note(text: str) -> dict[str, Any]:
    return {"type": "forklog-test/note", "data": {"text": text}}


def client_on(data_dir: Path, ops: FaultyFileOps) -> TestClient:
    return serve(data_dir, FileBackend(data_dir, clock=wall_clock_ms, ops=ops, sync=True, compression="none"))


def serve(data_dir: Path, backend: FileBackend) -> TestClient:
    client = TestClient(create_app(Settings(data_dir=data_dir), backend=backend), base_url="http://localhost")
    client.__enter__()
    while client.get("/readyz").status_code != 200:
        pass
    return client


def eio(*args: Any) -> Any:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_a_key_whose_append_was_refused_is_free_after_a_restart(data_dir: Path) -> None:
    ops = FaultyFileOps()
    client = client_on(data_dir, ops)
    client.post("/sessions", json={"id": "s"})
    session_file = str(data_dir / "sessions" / "s.jsonl")
    ops.fault(
        "write", lambda fd, data: eio() if os.readlink(f"/proc/self/fd/{fd}") == session_file else os.write(fd, data)
    )
    refused = client.post("/sessions/s/events", json={"events": [note("a")]}, headers=KEY)
    assert refused.status_code == 503
    ops.heal("write")
    assert (data_dir / "index" / "idempotency.jsonl").read_bytes(), "the record is written before the change"
    # Still running: the refused request is not remembered, so its retry runs.
    assert client.post("/sessions/s/events", json={"events": [note("b")]}, headers=KEY).status_code == 201
    client.__exit__(None, None, None)

    client = client_on(data_dir, FaultyFileOps())
    again = client.post("/sessions/s/events", json={"events": [note("b")]}, headers=KEY)
    assert again.headers["idempotent-replayed"] == "true"
    assert [event["data"]["text"] for event in client.get("/sessions/s/events").json()["events"]] == ["b"]
    client.__exit__(None, None, None)


def test_a_record_left_by_a_change_that_never_landed_is_dropped_at_start(data_dir: Path) -> None:
    ops = FaultyFileOps()
    client = client_on(data_dir, ops)
    ops.fault("link", eio)  # the create's file never appears, its record was written first
    assert client.post("/sessions", json={"id": "s"}, headers=KEY).status_code == 503
    ops.heal("link")
    client.__exit__(None, None, None)
    record_file = data_dir / "index" / "idempotency.jsonl"
    assert b'"k-1"' in record_file.read_bytes()

    client = client_on(data_dir, FaultyFileOps())
    assert b'"k-1"' not in record_file.read_bytes(), "the start kept a key whose change is not there"
    made = client.post("/sessions", json={"id": "s"}, headers=KEY)
    assert made.status_code == 201 and "idempotent-replayed" not in made.headers
    client.__exit__(None, None, None)


def test_a_record_whose_events_were_replaced_is_dropped_at_start(data_dir: Path) -> None:
    client = client_on(data_dir, FaultyFileOps())
    client.post("/sessions", json={"id": "s"})
    assert client.post("/sessions/s/events", json={"events": [note("a")]}, headers=KEY).status_code == 201
    client.__exit__(None, None, None)
    path = data_dir / "sessions" / "s.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"text":"a"', b'"text":"z"'))  # an operator's edit of that event

    client = client_on(data_dir, FaultyFileOps())
    again = client.post("/sessions/s/events", json={"events": [note("a")]}, headers=KEY)
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers
    client.__exit__(None, None, None)


def test_a_record_whose_create_never_landed_is_dropped_though_its_id_was_deleted_since(data_dir: Path) -> None:
    ops = FaultyFileOps()
    client = client_on(data_dir, ops)
    ops.fault("link", eio)
    assert client.post("/sessions", json={"id": "s"}, headers=KEY).status_code == 503
    ops.heal("link")
    assert client.post("/sessions", json={"id": "s"}).status_code == 201  # made without the key
    assert client.delete("/sessions/s").status_code == 204
    client.__exit__(None, None, None)

    client = client_on(data_dir, FaultyFileOps())
    made = client.post("/sessions", json={"id": "s"}, headers=KEY)
    assert made.status_code == 201 and "idempotent-replayed" not in made.headers
    assert client.get("/sessions/s").status_code == 200
    client.__exit__(None, None, None)


def test_a_record_whose_append_was_refused_is_dropped_though_its_session_was_deleted_since(data_dir: Path) -> None:
    ops = FaultyFileOps()
    client = client_on(data_dir, ops)
    client.post("/sessions", json={"id": "s"})
    session_file = str(data_dir / "sessions" / "s.jsonl")
    ops.fault(
        "write", lambda fd, data: eio() if os.readlink(f"/proc/self/fd/{fd}") == session_file else os.write(fd, data)
    )
    assert client.post("/sessions/s/events", json={"events": [note("a")]}, headers=KEY).status_code == 503
    ops.heal("write")
    assert client.delete("/sessions/s").status_code == 204  # the record names this very incarnation
    client.__exit__(None, None, None)

    client = client_on(data_dir, FaultyFileOps())
    again = client.post("/sessions/s/events", json={"events": [note("a")]}, headers=KEY)
    assert again.status_code == 404 and "idempotent-replayed" not in again.headers
    client.__exit__(None, None, None)


def test_the_key_of_a_deleted_session_is_kept_over_many_restarts(data_dir: Path) -> None:
    client = client_on(data_dir, FaultyFileOps())
    first = client.post("/sessions", json={"id": "s"}, headers=KEY)
    assert client.delete("/sessions/s").status_code == 204
    client.__exit__(None, None, None)
    for _ in range(2):  # the first start writes the file anew: the second reads what it wrote
        client = client_on(data_dir, FaultyFileOps())
        again = client.post("/sessions", json={"id": "s"}, headers=KEY)
        assert again.headers.get("idempotent-replayed") == "true" and again.content == first.content
        client.__exit__(None, None, None)


def expired_record(client: TestClient, backend: FileBackend) -> int:
    """Make a keyed session whose record the sweep at the returned time drops, and wait until that time is now: the
    records made from then on stay."""
    client.post("/sessions", json={"id": "old"}, headers={"Idempotency-Key": "old"})
    old = backend.remembered.recall(DEFAULT_TENANT, "old")
    assert old is not None
    sweep_at = old.created_at + 1
    while wall_clock_ms() < sweep_at:  # (a millisecond at most)
        pass
    return sweep_at


def sweep_during(ops: FaultyFileOps, call: str, backend: FileBackend, expired_before: int, *, on: str = "") -> None:
    """The next ``call`` (on the file ``on``, if given) first sweeps the records made before ``expired_before``: the
    change that makes it has written its record and is not kept yet (in flight)."""
    do: Callable[..., Any] = getattr(ops, call)

    def sweep_then_do(*args: Any) -> Any:
        if not on or os.readlink(f"/proc/self/fd/{args[0]}") == on:
            ops.heal(call)
            backend.remembered.forget(expired_before)
        return do(*args)

    ops.fault(call, sweep_then_do)


def test_a_create_in_flight_while_the_sweep_rewrites_the_records_replays_its_own_answer(data_dir: Path) -> None:
    ops = FaultyFileOps()
    backend = FileBackend(data_dir, clock=wall_clock_ms, ops=ops, sync=True, compression="none")
    client = serve(data_dir, backend)
    sweep_during(ops, "link", backend, expired_record(client, backend))  # a create links its file in place
    first = client.post("/sessions", json={"id": "s"}, headers=KEY)
    assert first.status_code == 201
    assert b'"old"' not in (data_dir / "index" / "idempotency.jsonl").read_bytes(), "the sweep ran in between"

    again = client.post("/sessions", json={"id": "s"}, headers=KEY)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert (again.content, again.headers["location"]) == (first.content, first.headers["location"])
    client.__exit__(None, None, None)


def test_an_append_in_flight_while_the_sweep_rewrites_the_records_replays_its_own_answer(data_dir: Path) -> None:
    ops = FaultyFileOps()
    backend = FileBackend(data_dir, clock=wall_clock_ms, ops=ops, sync=True, compression="none")
    client = serve(data_dir, backend)
    client.post("/sessions", json={"id": "s"})
    session_file = str(data_dir / "sessions" / "s.jsonl")
    sweep_during(ops, "write", backend, expired_record(client, backend), on=session_file)
    first = client.post("/sessions/s/events", json={"events": [note("a")]}, headers=KEY)
    assert first.status_code == 201
    assert b'"old"' not in (data_dir / "index" / "idempotency.jsonl").read_bytes(), "the sweep ran in between"

    again = client.post("/sessions/s/events", json={"events": [note("a")]}, headers=KEY)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert [event["data"]["text"] for event in client.get("/sessions/s/events").json()["events"]] == ["a"]
    client.__exit__(None, None, None)


def test_a_sweep_that_folds_a_deletion_note_keeps_the_answers_of_changes_in_flight(data_dir: Path) -> None:
    ops = FaultyFileOps()
    backend = FileBackend(data_dir, clock=wall_clock_ms, ops=ops, sync=True, compression="none")
    client = serve(data_dir, backend)
    sweep_at = expired_record(client, backend)
    gone = client.post("/sessions", json={"id": "gone"}, headers={"Idempotency-Key": "gone"})
    assert client.delete("/sessions/gone").status_code == 204  # its deletion note lies before the next record
    sweep_during(ops, "link", backend, sweep_at)
    first = client.post("/sessions", json={"id": "s"}, headers=KEY)
    assert first.status_code == 201
    assert b'"deleted"' not in (data_dir / "index" / "idempotency.jsonl").read_bytes(), "the sweep folded the note"

    for restarted in (False, True):
        again = client.post("/sessions", json={"id": "s"}, headers=KEY)
        assert again.headers["idempotent-replayed"] == "true" and again.content == first.content, restarted
        replayed = client.post("/sessions", json={"id": "gone"}, headers={"Idempotency-Key": "gone"})
        assert replayed.headers["idempotent-replayed"] == "true" and replayed.content == gone.content, restarted
        client.__exit__(None, None, None)
        client = client_on(data_dir, FaultyFileOps())
    assert client.get("/sessions/gone").status_code == 404, "the deleted session was not made again"
    client.__exit__(None, None, None)
