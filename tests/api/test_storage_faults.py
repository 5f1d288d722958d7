"""Faults of the store answer ``503 STORAGE_UNAVAILABLE`` problems on both backends, never a 500; a read that fails
says nothing was changed, a change refused says nothing was stored, and a change whose outcome the database left
unknown says so (retry with the Idempotency-Key), never "nothing was stored"."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.errors import Access
from app.backends.files import FileBackend, FileOps
from app.backends.postgres import PostgresBackend
from app.backends.postgres.pool import Connection
from app.domain.clock import wall_clock_ms
from tests.api.builders import note, turn
from tests.api.conftest import LOCAL
from tests.api.helpers import assert_problem, wait_ready

pytestmark = pytest.mark.files_only  # each test brings its backends: the file one and a PostgreSQL one

STORED_NOTHING = "nothing was stored"
CHANGED_NOTHING = "nothing was changed"


def read_failed(response: Any) -> None:
    body = assert_problem(response, 503, "STORAGE_UNAVAILABLE")
    assert CHANGED_NOTHING in body["detail"], body
    assert STORED_NOTHING not in body["detail"], body


def change_refused(response: Any) -> None:
    body = assert_problem(response, 503, "STORAGE_UNAVAILABLE")
    assert STORED_NOTHING in body["detail"], body


def outcome_unknown(response: Any) -> None:
    body = assert_problem(response, 503, "STORAGE_UNAVAILABLE")
    assert STORED_NOTHING not in body["detail"], body
    assert "Idempotency-Key" in body["detail"], body


def changes(client: TestClient) -> list[Any]:
    """One request of each kind of change; none may be acknowledged while the store refuses."""
    return [
        client.post("/sessions", json={"id": "new"}),
        client.post("/sessions/s/events", json={"events": [note("a")]}),
        client.post("/sessions/s/fork", json={"sessionId": "child"}),
        client.delete("/sessions/s"),
    ]


# -- the file backend --------------------------------------------------------------------------------------------------


class FaultyDisk(FileOps):
    """A disk whose writes and syncs (``writes``) or reads (``reads``) fail while the flag is set."""

    def __init__(self) -> None:
        self.writes = False
        self.reads = False

    def _write_fault(self) -> None:
        if self.writes:
            raise OSError(errno.ENOSPC, "No space left on device")

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._write_fault()
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._write_fault()
        super().fsync(fd)

    def fdatasync(self, fd: int) -> None:
        self._write_fault()
        super().fdatasync(fd)

    def rename(self, source: Any, target: Any) -> None:
        self._write_fault()
        super().rename(source, target)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if self.reads:
            raise OSError(errno.EIO, "Input/output error")
        return super().pread(fd, size, offset)


@contextlib.contextmanager
def file_client(data_dir: Path, disk: FaultyDisk) -> Iterator[TestClient]:
    backend = FileBackend(data_dir, clock=wall_clock_ms, ops=disk, checkpoint_interval=None)
    app = create_app(Settings(data_dir=data_dir, fsync=True), backend=backend)
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as client:
        wait_ready(client)
        yield client


def test_a_refusing_disk_answers_each_change_and_read_with_its_own_503(tmp_path: Path) -> None:
    disk = FaultyDisk()
    with file_client(tmp_path / "data", disk) as client:
        assert client.post("/sessions", json={"id": "s", "seed": turn(1)}).status_code == 201
        keyed: dict[str, Any] = {"json": {"events": turn(2)}, "headers": {"Idempotency-Key": "k1"}}
        kept = client.post("/sessions/s/events", **keyed)
        assert kept.status_code == 201, kept.text

        disk.writes = True
        for answer in changes(client):
            change_refused(answer)
        disk.writes = False

        disk.reads = True  # the replay of a kept answer reads it from the disk
        read_failed(client.post("/sessions/s/events", **keyed))
        disk.reads = False

        assert client.get("/sessions/s").json()["eventCount"] == kept.json()["session"]["eventCount"]
        replayed = client.post("/sessions/s/events", **keyed)
        assert replayed.headers.get("Idempotent-Replayed") == "true"
        assert replayed.json() == kept.json()
        assert client.get("/sessions/new").status_code == 404
        assert client.get("/sessions/child").status_code == 404


# -- PostgreSQL -------------------------------------------------------------------------------------------------------


class FaultyPostgres(PostgresBackend):
    """Raises ``fault`` on the connection of every read or change (``on``) as its statement would, while set."""

    fault: BaseException | None = None
    on: Access = Access.CHANGE

    @contextlib.asynccontextmanager
    async def _connection(self, access: Access) -> AsyncIterator[Connection]:
        async with super()._connection(access) as conn:
            if self.fault is not None and access is self.on:
                raise self.fault
            yield conn


@pytest.fixture
def pg_client(forklog_db: str, tmp_path: Path) -> Iterator[tuple[TestClient, FaultyPostgres]]:
    backend = FaultyPostgres(forklog_db, clock=wall_clock_ms)
    app = create_app(Settings(data_dir=tmp_path / "unused", fsync=False, database_url=forklog_db), backend=backend)
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as client:
        wait_ready(client)
        assert client.post("/sessions", json={"id": "s", "seed": turn(1)}).status_code == 201
        yield client, backend


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(asyncpg.SerializationError("could not serialize access"), id="serialization-failure"),
        pytest.param(asyncpg.DeadlockDetectedError("deadlock detected"), id="deadlock"),
        pytest.param(asyncpg.ReadOnlySQLTransactionError("cannot execute in a read-only transaction"), id="standby"),
        pytest.param(asyncpg.CheckViolationError("a check failed"), id="any-other-server-error"),
    ],
)
def test_a_change_the_database_refused_answers_503_nothing_stored(
    pg_client: tuple[TestClient, FaultyPostgres], fault: BaseException
) -> None:
    client, backend = pg_client
    before = client.get("/sessions/s/events").json()
    backend.fault = fault

    for answer in changes(client):
        change_refused(answer)

    backend.fault = None
    assert client.get("/sessions/s/events").json() == before
    assert client.get("/sessions/new").status_code == 404


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(asyncpg.ConnectionDoesNotExistError("closed in the middle of operation"), id="lost"),
        pytest.param(asyncpg.TransactionResolutionUnknownError("unknown"), id="commit-unknown"),
        pytest.param(asyncpg.AdminShutdownError("terminating connection due to administrator command"), id="shutdown"),
        pytest.param(ConnectionResetError(104, "Connection reset by peer"), id="reset"),
        pytest.param(TimeoutError(), id="timeout"),
    ],
)
def test_a_change_whose_connection_was_lost_says_its_outcome_is_unknown(
    pg_client: tuple[TestClient, FaultyPostgres], fault: BaseException
) -> None:
    client, backend = pg_client
    backend.fault = fault

    for answer in changes(client):
        outcome_unknown(answer)


@pytest.mark.parametrize(
    "fault",
    [
        pytest.param(asyncpg.SerializationError("could not serialize access"), id="serialization-failure"),
        pytest.param(asyncpg.ConnectionDoesNotExistError("closed in the middle of operation"), id="lost"),
        pytest.param(asyncpg.InterfaceError("cannot perform operation: connection is closed"), id="closed"),
        pytest.param(OSError(errno.EHOSTUNREACH, "No route to host"), id="unreachable"),
    ],
)
def test_a_read_that_fails_answers_503_without_blaming_a_change(
    pg_client: tuple[TestClient, FaultyPostgres], fault: BaseException
) -> None:
    client, backend = pg_client
    backend.on = Access.READ
    backend.fault = fault

    for answer in (
        client.get("/sessions/s"),
        client.get("/sessions"),
        client.get("/sessions/s/events"),
        client.get("/sessions/s/history"),
        client.get("/sessions/s/lineage"),
        client.post("/sessions/s/snapshot"),
        client.delete("/sessions/s"),  # its first step reads the session
    ):
        read_failed(answer)
