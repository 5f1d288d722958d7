"""Fixtures of the HTTP tests: apps on a fresh data directory and clients that are ready to serve."""

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


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def make_app(data_dir: Path) -> AppFactory:
    """``make_app(backend=None, **settings)``: an app on ``data_dir`` (or on ``backend``), fsync off."""

    def make(*, backend: Backend | None = None, **settings: Any) -> FastAPI:
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
