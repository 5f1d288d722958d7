"""Fixtures of the HTTP tests: apps on a fresh store and clients that are ready to serve.

Every test that makes an app runs twice, on a fresh data directory (``[file]``) and on a fresh PostgreSQL database
(``[postgres]``), unless it is marked ``files_only``: a test about the data directory itself, or one that brings a
backend of its own (it would run the same twice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from app.api.app import create_app
from app.api.settings import Settings
from app.backends.base import Backend
from tests.api.helpers import wait_ready

AppFactory = Callable[..., FastAPI]
# Without keys the service answers only requests for this machine (spec 9): TestClient's "testserver" is refused.
LOCAL = "http://localhost"
ClientFactory = Callable[..., TestClient]


STORES = ["file", "postgres"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "files_only: an HTTP test run on the file backend only (not [postgres])")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "store" in metafunc.fixturenames:
        files_only = metafunc.definition.get_closest_marker("files_only") is not None
        metafunc.parametrize("store", ["file"] if files_only else STORES, indirect=True)


@pytest.fixture
def store(request: pytest.FixtureRequest) -> str:
    """Which backend the test's apps serve from: ``file`` or ``postgres``."""
    kind: str = request.param
    return kind


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def make_app(data_dir: Path, store: str, request: pytest.FixtureRequest) -> AppFactory:
    """``make_app(backend=None, **settings)``: an app on ``data_dir`` or a fresh database (the ``store``), or on
    ``backend``; fsync off."""
    # One database per test, made before the clients (so dropped after their apps closed): apps made again in a
    # test (a restart) find what the first one stored.
    database_url = request.getfixturevalue("forklog_db") if store == "postgres" else None

    def make(*, backend: Backend | None = None, **settings: Any) -> FastAPI:
        if backend is None and database_url is not None and "database_url" not in settings:
            settings["database_url"] = database_url
        return create_app(Settings(data_dir=data_dir, fsync=False, **settings), backend=backend)

    return make


@pytest.fixture
def make_client(make_app: AppFactory) -> Iterator[ClientFactory]:
    """``make_client(app=None, *, ready=True, raise_server_exceptions=True, **settings)``: a started client.

    With ``ready`` it waits for ``/readyz`` (recovery runs in the background at startup). Every client is closed,
    and its app shut down, at teardown.
    """
    with ExitStack() as stack:

        def make(
            app: FastAPI | None = None, *, ready: bool = True, raise_server_exceptions: bool = True, **settings: Any
        ) -> TestClient:
            client = TestClient(
                app or make_app(**settings), base_url=LOCAL, raise_server_exceptions=raise_server_exceptions
            )
            stack.enter_context(client)
            if ready:
                wait_ready(client)
            return client

        yield make


@pytest.fixture
def client(make_client: ClientFactory) -> TestClient:
    """A ready client of an app on a fresh data directory."""
    return make_client()
